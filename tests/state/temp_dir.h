// Temporary directories for the state tests: the shared test support's TempDir.
#pragma once

#include "tests/support/test_support.h"
