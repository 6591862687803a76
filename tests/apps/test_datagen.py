#!/usr/bin/env python3
"""End-to-end tests of antdt-datagen, run by ctest: it never destroys data, refuses impossible
sizes in one line, and generates digit images.

    python3 test_datagen.py BUILD_DIR SOURCE_DIR [unittest args, e.g. ExistingOutputs]

Each class is one ctest test. ExistingOutputs, Sizes and HeldOutOptions are defects a hostile
probe found (an existing file replaced with exit 0, also through a symbolic or a hard link; a
raw std::vector message and exit 1 for -n 99999999999999; --eval-output alone wrote a held-out
set of samples/4, 2 samples for -n 10); FullDisk writes onto a small tmpfs (root only; skipped,
saying why, where it cannot be mounted); Digits runs --kind digits. Only the standard library
is used: file contents are compared by hash, not read as HDF5 (tests/dds/test_data_images.cpp
reads the images).
"""
import hashlib
import os
import re
import shutil
import stat
import tempfile
import unittest

from harness import DATAGEN, ENV, Mount, assert_one_error, run


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class Workdir(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="antdt-datagen-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def path(self, name):
        return os.path.join(self.dir, name)

    def gen(self, *args):
        return run([DATAGEN, "--samples", 40, "--dim", 4, "--classes", 3, *args])

    def make(self, name, seed=1):
        """An existing data set, as a user's earlier run left it; returns its path."""
        p = self.path(name)
        r = self.gen("-o", p, "--seed", seed)
        self.assertEqual(r.returncode, 0, r.stderr)
        return p

    def assert_one_error(self, r, code, *needles):
        return assert_one_error(self, r, code, *needles)

    def snapshot(self):
        """Every entry of the work directory: name -> (kind, inode, content hash or link target)."""
        out = {}
        for name in os.listdir(self.dir):
            p = self.path(name)
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                out[name] = ("link", os.readlink(p))
            else:
                out[name] = ("file", st.st_ino, st.st_mtime_ns, digest(p))
        return out


class ExistingOutputs(Workdir):
    """-o onto an existing file replaced it with exit 0, and --eval-output onto an existing
    training set (also through a symbolic link or a hard link) replaced that set."""

    def test_an_existing_output_is_refused_before_anything_is_written(self):
        train = self.make("train.h5")
        os.symlink("train.h5", self.path("sym.h5"))
        os.link(train, self.path("hard.h5"))
        before = self.snapshot()
        small = ["--samples", 40, "--dim", 4, "--classes", 3]
        new = self.path("new.h5")
        cases = (([*small, "-o", train], "--output", train),
                 ([*small, "-o", self.path("sym.h5")], "--output", "sym.h5"),
                 ([*small, "-o", new, "--eval-output", train, "--eval-samples", 5], "--eval-output", train),
                 ([*small, "-o", new, "--eval-output", self.path("sym.h5"), "--eval-samples", 5], "--eval-output",
                  "sym.h5"),
                 ([*small, "-o", new, "--eval-output", self.path("hard.h5"), "--eval-samples", 5], "--eval-output",
                  "hard.h5"),
                 (["--kind", "digits", "-n", 10, "-o", self.path("hard.h5")], "--output", "hard.h5"))
        for args, option, named in cases:
            r = run([DATAGEN, *args])
            line = self.assert_one_error(r, 2, option, named, "exists", "--overwrite")
            self.assertEqual(self.snapshot(), before, f"{args}: nothing written, removed or replaced ({line})")
        # --overwrite has no environment variable: an exported one must not replace files.
        r = run([DATAGEN, *small, "-o", train], env=dict(ENV, ANTDT_OVERWRITE="1"))
        self.assert_one_error(r, 2, "--output", "exists")
        self.assertEqual(self.snapshot(), before)

    def test_overwrite_replaces_the_file_a_link_points_at_and_keeps_the_link(self):
        train = self.make("train.h5", seed=1)
        os.symlink("train.h5", self.path("sym.h5"))
        old = digest(train)
        r = self.gen("-o", self.path("sym.h5"), "--seed", 2, "--overwrite")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(os.path.islink(self.path("sym.h5")), "the link is still a link")
        self.assertNotEqual(digest(train), old, "the file it points at holds the new set")
        self.assertEqual(sorted(os.listdir(self.dir)), ["sym.h5", "train.h5"], "no temporary is left")

    def test_the_two_outputs_are_never_one_file_even_with_overwrite(self):
        train = self.make("train.h5")
        os.symlink("train.h5", self.path("sym.h5"))
        os.link(train, self.path("hard.h5"))
        before = self.snapshot()
        for other in (train, self.path("sym.h5"), self.path("hard.h5"), os.path.join(self.dir, ".", "train.h5")):
            r = self.gen("-o", train, "--eval-output", other, "--eval-samples", 5, "--overwrite")
            self.assert_one_error(r, 2, "--eval-output", "--output", "same file")
            self.assertEqual(self.snapshot(), before, other)
        # Not yet existing: the same name twice, or a link to where -o will be.
        os.symlink("fresh.h5", self.path("to-fresh.h5"))
        for other in (self.path("fresh.h5"), self.path("to-fresh.h5")):
            r = self.gen("-o", self.path("fresh.h5"), "--eval-output", other, "--eval-samples", 5)
            self.assert_one_error(r, 2, "same file")
            self.assertFalse(os.path.exists(self.path("fresh.h5")))

    def test_a_device_or_a_directory_is_never_replaced(self):
        r = self.gen("-o", "/dev/null", "--overwrite")
        self.assert_one_error(r, 2, "--output", "/dev/null", "not a regular file")
        self.assertTrue(stat.S_ISCHR(os.stat("/dev/null").st_mode))
        r = self.gen("-o", self.dir, "--overwrite")
        self.assert_one_error(r, 2, "--output", "is a directory")


class Sizes(Workdir):
    """-n 99999999999999 ended with exit 1 and std::vector's own message."""

    def test_impossible_sizes_are_one_line_usage_errors_with_the_limit(self):
        out = self.path("x.h5")
        for args, needles in ((["-n", "99999999999999"], ["--samples", "99999999999999", "1099511627776"]),
                              (["-n", "0"], ["--samples", "[1, 1099511627776]"]),
                              (["-n", "-5"], ["--samples"]),
                              (["-n", "1e3"], ["--samples"]),
                              (["-d", "99999999999"], ["--dim", "2147483647"]),
                              (["-c", "1"], ["--classes", "[2, 1048576]"]),
                              (["--eval-output", self.path("e.h5"), "--eval-samples", "99999999999999"],
                               ["--eval-samples", "1099511627776"]),
                              (["-n", "100000000000", "-d", "100000"], ["--samples 100000000000", "memory"]),
                              (["--eval-output", self.path("e.h5"), "--eval-samples", "1000000000000"],
                               ["--eval-samples 1000000000000", "memory"]),
                              (["--noise", "nan"], ["--noise"]),
                              (["--noise", "inf"], ["--noise"]),
                              (["--noise", "0"], ["--noise 0"]),
                              (["--kind", "digits", "--image-size", "4"], ["--image-size", "[8, 256]"]),
                              (["--kind", "digits", "--image-size", "100000"], ["--image-size", "[8, 256]"]),
                              (["--kind", "digits", "-c", "11"], ["--classes 11", "10 digits"]),
                              (["--kind", "digits", "-d", "16"], ["--dim", "--kind digits"]),
                              (["--image-size", "16"], ["--image-size", "--kind digits"]),
                              (["--kind", "pictures"], ["--kind"])):
            r = run([DATAGEN, "-o", out, *args])
            self.assert_one_error(r, 2, *needles)
            self.assertNotIn("vector", r.stderr)
            self.assertEqual(os.listdir(self.dir), [], f"{args}: nothing written")


class HeldOutOptions(Workdir):
    """--eval-output without --eval-samples wrote a held-out set of samples/4 (2 samples for
    -n 10) without saying so."""

    def test_the_held_out_set_needs_both_options(self):
        r = self.gen("-o", self.path("t.h5"), "--eval-output", self.path("e.h5"))
        self.assert_one_error(r, 2, "--eval-output needs --eval-samples")
        r = self.gen("-o", self.path("t.h5"), "--eval-samples", 5)
        self.assert_one_error(r, 2, "--eval-samples needs --eval-output")
        self.assertEqual(os.listdir(self.dir), [])
        r = self.gen("-o", self.path("t.h5"), "--eval-output", self.path("e.h5"), "--eval-samples", 7)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("7 held-out samples", r.stdout)
        self.assertEqual(sorted(os.listdir(self.dir)), ["e.h5", "t.h5"])


class FullDisk(Workdir):
    """A full disk: exit 3, no half-written file, no temporary, and existing files as they were,
    for both outputs (neither is put in place unless both were written whole)."""

    def mount(self):
        m = Mount(self.path("small"), size="256k")
        if not m.ok:
            self.skipTest(f"cannot mount a tmpfs here ({m.why}); this check needs root")
        self.addCleanup(m.close)
        return m

    def test_a_full_disk_leaves_no_file_and_earlier_files_as_they_were(self):
        m = self.mount()
        train, held_out = os.path.join(m.path, "train.h5"), os.path.join(m.path, "eval.h5")
        big = ["--samples", 20000, "--dim", 8]  # 640 KB of features: more than the 256 KiB there
        r = run([DATAGEN, "-o", train, *big])
        self.assert_one_error(r, 3, train)
        self.assertEqual(os.listdir(m.path), [], "no half-written file and no temporary")
        # Earlier small sets (a few KB each), then larger ones over them that do not fit.
        for p in (train, held_out):
            self.assertEqual(run([DATAGEN, "-o", p, "--samples", 50, "--dim", 4, "--classes", 3]).returncode, 0)
        before = {p: digest(p) for p in (train, held_out)}
        for args in ([*big, "--eval-output", held_out, "--eval-samples", 10],  # the training set fails
                     ["--samples", 10, "--dim", 8, "--eval-output", held_out, "--eval-samples", 20000]):  # held-out
            r = run([DATAGEN, "-o", train, *args, "--overwrite"])
            self.assert_one_error(r, 3)
            self.assertEqual({p: digest(p) for p in before}, before, f"{args}: both files as they were")
            self.assertEqual(sorted(os.listdir(m.path)), ["eval.h5", "train.h5"], "no temporary is left")


class Digits(Workdir):
    """--kind digits: images 1 x S x S; their reading (shape attribute, pixels) is tested in
    tests/dds/test_data_images.cpp."""

    def test_digit_images_are_written_with_their_shape(self):
        out, held_out = self.path("d.h5"), self.path("e.h5")
        r = run([DATAGEN, "--kind", "digits", "-o", out, "-n", 300, "--eval-output", held_out, "--eval-samples", 50,
                 "--sort-by-class"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"wrote .*d\.h5: 300 samples x 784 features \(images 1x28x28\), 10 classes, "
                                   r"digits \(seed 7\), stored in class order")
        # float32 pixels dominate the file: 300 x 784 x 4 bytes plus a few KB of HDF5.
        self.assertGreater(os.path.getsize(out), 300 * 784 * 4)
        self.assertLess(os.path.getsize(out), 300 * 784 * 4 + 16384)
        with open(out, "rb") as f:
            self.assertIn(b"sample_shape", f.read())
        r = run([DATAGEN, "--kind", "digits", "-o", self.path("s.h5"), "-n", 50, "--image-size", 12, "-c", 4])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("50 samples x 144 features (images 1x12x12), 4 classes", r.stdout)

    def test_help_documents_every_new_option(self):
        r = run([DATAGEN, "--help"])
        self.assertEqual(r.returncode, 0)
        for option in ("--overwrite", "--kind", "--image-size", "--sort-by-class", "--eval-samples"):
            self.assertRegex(r.stdout, re.escape(option) + r"\b.*\S")


if __name__ == "__main__":
    unittest.main()
