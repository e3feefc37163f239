/* A module the rules tests load and unload (tests/place/test_rules.cpp): a call site in an object
   that is not there for the whole run. */
__attribute__((visibility("default"), noinline)) int hm_site_module_fn(int x) { return x * 5 + 1; }
