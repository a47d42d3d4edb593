// Umbrella header of the embedrt C++ API.
#pragma once

#include "embedrt/error.hpp"
#include "embedrt/fault_guard.hpp"
#include "embedrt/format.hpp"
#include "embedrt/model.hpp"
#include "embedrt/reference.hpp"
#include "embedrt/table_file.hpp"
#include "embedrt/table_file_writer.hpp"
#include "embedrt/version.hpp"
