// Umbrella header: everything public in antdt, the API a training code uses (docs/job.md,
// "Which headers a program needs"). antdt/cli.hpp is not here: it needs CLI11
// (find_package(antdt COMPONENTS cli)).
#pragma once

#include "antdt/config.hpp"
#include "antdt/data.hpp"
#include "antdt/emulation.hpp"
#include "antdt/error.hpp"
#include "antdt/job.hpp"
#include "antdt/options.hpp"
#include "antdt/plan.hpp"
#include "antdt/report.hpp"
#include "antdt/runtime.hpp"
#include "antdt/step.hpp"
