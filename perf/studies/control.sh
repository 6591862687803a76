#!/usr/bin/env bash
# control study: CSV + PNG into perf/results/ (perf/studies/run.py, perf/README.md). --long for the long version.
exec python3 "$(dirname "$0")/run.py" control "$@"
