#include <cstdio>

int main() {
  std::puts("driftd " DRIFTD_VERSION);
  return 0;
}
