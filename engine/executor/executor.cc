#include "engine/executor/executor.h"
