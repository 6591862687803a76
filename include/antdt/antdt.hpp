// Umbrella header: everything public in antdt.
#pragma once

#include "antdt/comm.hpp"
#include "antdt/config.hpp"
#include "antdt/device.hpp"
#include "antdt/error.hpp"
#include "antdt/launcher.hpp"
#include "antdt/log.hpp"
#include "antdt/runtime.hpp"
