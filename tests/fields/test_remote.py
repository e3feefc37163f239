"""FDB's own distribution in front of hetmem stores: two store servers (`fdb-server`, `type: store`,
`store: hetmem`) on loopback, as two nodes, and a client whose catalogue is local and whose data
goes to them (`store: remote`); FDB spreads the databases over the servers, a server picked at
random for each."""

import socket
import subprocess
import time

import writer
from hetmem import fields


def free_port():
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def wait_listening(port, timeout=30):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with socket.socket() as s:
            if s.connect_ex(("localhost", port)) == 0:
                return
        time.sleep(0.1)
    raise AssertionError(f"fdb-server on port {port} did not start")


def test_two_store_servers_with_hetmem_stores_behind_one_catalogue(tmp_path):
    (tmp_path / "schema").write_text(fields.SCHEMA)
    ports = [free_port(), free_port()]
    servers = []
    try:
        for i, port in enumerate(ports):
            root = tmp_path / f"node{i}"
            root.mkdir()
            cfg = tmp_path / f"store{i}.yaml"
            cfg.write_text(f"---\ntype: store\nstore: hetmem\nserverPort: {port}\nserverThreaded: true\nspaces:\n"
                           f"- handler: Default\n  roots:\n  - path: {root}\n")
            servers.append(subprocess.Popen([fields.tool("fdb-server")], env=fields.environment(cfg),
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        for port in ports:
            wait_listening(port)
        endpoints = "".join(f'    - "localhost:{p}"\n' for p in ports)
        client = tmp_path / "client.yaml"
        (tmp_path / "catalogue").mkdir()
        client.write_text(f"---\ntype: local\nstore: remote\nengine: toc\nstores:\n{endpoints}fieldLocationEndpoints:\n"
                          f"{endpoints}schema: {tmp_path / 'schema'}\nspaces:\n    - handler: Default\n      roots:\n"
                          f"          - path: {tmp_path / 'catalogue'}\n")
        # FDB's client picks a store server at random for each dataset (ClientConnectionRouter): with
        # 24 datasets, all of them on one server has a chance of 2 in 2^24 (with 8 it was 1 in 128).
        expvers = [f"hr{i:02d}" for i in range(24)]
        grib = tmp_path / "in.grib"
        grib.write_bytes(b"".join(writer.field_bytes(e, s, lv, 16) for e in expvers for s in range(2) for lv in (1, 2)))
        fields.run_tool("fdb-write", [str(grib)], client)
        out = tmp_path / "out.grib"
        fields.run_tool("fdb-read", ["--extract", str(grib), str(out)], client)
        assert sorted(fields.split_messages(out.read_bytes())) == sorted(fields.split_messages(grib.read_bytes()))
        for e in expvers:
            listed = fields.run_tool("fdb-list", [f"class=rd,expver={e},stream=oper,date=20261125,time=0000,domain=g"],
                                     client).stdout
            assert listed.count("param=130") == 4, listed
        pools = [sorted(p.name for p in (tmp_path / f"node{i}").rglob("*.hmpool")) for i in range(2)]
        assert all(pools), f"both nodes hold pools: {pools}"
        assert not list(tmp_path.rglob("*.data")), "a POSIX data file was written"
    finally:
        for s in servers:
            s.terminate()
        for s in servers:
            try:
                s.wait(timeout=10)
            except subprocess.TimeoutExpired:
                s.kill()
