"""The module as installed (docs/python.md, "Install"): each class is one ctest test,
python.install.<Class>.

Prefix: `cmake --install` of this build into a scratch prefix, which is then moved elsewhere
(an installed tree must work from wherever it is put); the interpreter the module was built for
then imports antdt from <prefix>/<ANTDT_PYTHON_INSTALL_DIR> alone (PYTHONPATH, no build tree, no
LD_LIBRARY_PATH) and runs a 2-rank job on it, with antdt.torch where PyTorch is there. This
reuses the build: `pip install ./adapters/python` compiles the whole library again, too slow for
every CI run, and is checked by hand (docs/python.md says how).
"""
import os
import re
import shutil
import unittest

from support import BUILD, ENV, PY, TempDirTest, have, mpirun, require, run, script

require("numpy")


def cache_value(name):
    """A variable of this build's CMakeCache.txt."""
    with open(os.path.join(BUILD, "CMakeCache.txt")) as f:
        for line in f:
            m = re.match(rf"{re.escape(name)}:[A-Z]+=(.*)$", line.rstrip("\n"))
            if m:
                return m.group(1)
    raise AssertionError(f"{name} is not in {BUILD}/CMakeCache.txt")


class Prefix(TempDirTest):
    def test_the_installed_package_imports_and_trains_from_a_moved_prefix(self):
        installed, moved = self.path("prefix"), self.path("moved")
        r = run(["cmake", "--install", BUILD, "--prefix", installed], timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout[-2000:] + r.stderr[-2000:])
        site_dir = cache_value("ANTDT_PYTHON_INSTALL_DIR")
        self.assertTrue(os.path.isfile(os.path.join(installed, site_dir, "antdt", "__init__.py")),
                        f"cmake --install put no antdt package in <prefix>/{site_dir}")
        shutil.move(installed, moved)
        site = os.path.join(moved, site_dir)

        env = {k: v for k, v in ENV.items() if k not in ("PYTHONPATH", "LD_LIBRARY_PATH")}
        env["PYTHONPATH"] = site
        # Nothing else on the path: antdt must come from the moved prefix.
        where = run([PY, "-c", "import antdt, antdt.errors; print(antdt.__file__); print(antdt._antdt.__file__)"],
                    env=env)
        self.assertEqual(where.returncode, 0, where.stderr[-2000:])
        for path in where.stdout.split():
            self.assertTrue(os.path.realpath(path).startswith(os.path.realpath(site) + os.sep),
                            f"antdt came from {path}, not from the moved prefix {site}")

        # Rank 0 trains 8 of each step's 12 samples, rank 1 4; with PyTorch, a linear model
        # through antdt.torch.Bridge as well.
        check = script(self.dir, "installed.py", """
            import sys
            import numpy as np
            import antdt
            if sys.argv[1] == "torch":
                import torch
                import antdt.torch

            def main():
                job = antdt.Job(dataset_size=60, global_batch=12, steps=3, policy="static", fixed_split=[8, 4],
                                quiet=True)
                model = None
                if sys.argv[1] == "torch":
                    model = torch.nn.Linear(3, 1, bias=False)
                    torch.nn.init.zeros_(model.weight)
                    bridge = antdt.torch.Bridge(job, model, torch.optim.SGD(model.parameters(), lr=1.0))
                total = 0
                while job.next_step():
                    counts = np.zeros(1, dtype=np.float32)
                    if model is not None:
                        bridge.zero_grad()
                    for idx in job.micro_batches():
                        counts += len(idx)
                        if model is not None:
                            model(torch.ones(len(idx), 3)).sum().backward()
                    total += job.reduce(counts)  # the mean over the step's samples of 1 each
                    assert abs(counts[0] - 1.0) < 1e-6, counts
                    if model is not None:
                        bridge.step()
                weight = "-" if model is None else "%.1f" % float(model.weight.sum())
                print(f"rank {job.rank} split {job.split} samples {total} weight {weight}")
                return job.exit_code

            sys.exit(antdt.run_main(main))
        """)
        with_torch = have("torch")
        r = mpirun(2, PY, check, "torch" if with_torch else "numpy", env=env)
        self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr[-3000:])
        for rank in range(2):
            self.assertIn(f"rank {rank} split [8, 4] samples 36", r.ranks[rank])
            if with_torch:
                # Each step's mean gradient of w . (1, 1, 1) is (1, 1, 1): 3 SGD steps of lr 1 from 0.
                self.assertIn("weight -9.0", r.ranks[rank])


if __name__ == "__main__":
    unittest.main()
