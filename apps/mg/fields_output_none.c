/* hetmem-mg built without FDB5 (scripts/setup.sh installs it): mg.output_interval says so. */
const char *mg_fields_error(void) {
  return "mg.output_interval: this hetmem-mg was built without FDB5 output (the Python packages fdb5lib and "
         "eccodeslib were missing when it was configured; scripts/setup.sh installs them)";
}
int mg_fields_open(const char *expver, int n) { (void)expver; (void)n; return 1; }
int mg_fields_write(int step, int param, const double *field, int n) { (void)step; (void)param; (void)field; (void)n; return 1; }
int mg_fields_flush(void) { return 1; }
void mg_fields_close(void) {}
long mg_fields_count(void) { return 0; }
long mg_fields_bytes(void) { return 0; }
