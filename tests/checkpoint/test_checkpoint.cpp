// Checkpoint store: round trips, atomic commit and retention, fallback past damaged
// checkpoints, and one clear CheckpointError for each way a file can be bad.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "antdt/config.hpp"
#include "antdt/error.hpp"
#include "checkpoint/checkpoint.hpp"
#include "checkpoint/file_checksum.hpp"
#include "checkpoint/fnv1a.hpp"

namespace fs = std::filesystem;
using antdt::CheckpointDirectoryLock;
using antdt::CheckpointError;
using antdt::CheckpointReader;
using antdt::CheckpointWriter;
using antdt::describe_difference;
using antdt::FileError;
using antdt::is_checkpoint_store_name;
using antdt::read_run_identity;
using antdt::remove_checkpoints;
using antdt::RunIdentity;
using antdt::UsageError;
using antdt::write_run_identity;

namespace {

class Checkpoint : public testing::Test {
 protected:
  void SetUp() override {
    const auto* info = testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("antdt-ckpt-" + std::to_string(::getpid()) + "-" + info->test_suite_name() + "-" + info->name());
    fs::remove_all(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // Commits a small checkpoint for `step` whose contents identify the step.
  std::string commit_step(std::int64_t step, int keep = 3) {
    CheckpointWriter w(dir_.string(), step);
    const std::vector<float> params(16, static_cast<float>(step));
    w.put_floats("model/params", params);
    w.put_int64("train/step", step);
    return w.commit(keep);
  }

  // Runs `read` and returns the CheckpointError message; fails the test if none is thrown.
  template <class F>
  static std::string error_of(F&& read) {
    try {
      read();
    } catch (const CheckpointError& e) {
      return e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "expected CheckpointError, got another exception: " << e.what();
      return {};
    }
    ADD_FAILURE() << "expected CheckpointError, nothing was thrown";
    return {};
  }

  std::vector<std::string> file_names() const {
    std::vector<std::string> names;
    if (!fs::exists(dir_)) return names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

  fs::path dir_;
};

// One line, naming the file, containing every fragment.
void expect_message(const std::string& message, const std::string& file, std::initializer_list<const char*> fragments) {
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_NE(message.find(file), std::string::npos) << "message does not name the file: " << message;
  for (const char* f : fragments)
    EXPECT_NE(message.find(f), std::string::npos) << "missing '" << f << "' in: " << message;
}

void flip_byte(const fs::path& path, std::uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good());
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x5a);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
  ASSERT_TRUE(f.good());
}

std::vector<char> read_all(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// Writes a new header over a file changed behind antdt's back (with plain HDF5, or a flipped
// byte), as a buggy writer would: the whole-file checksum then passes, so the checks behind it
// (HDF5's own, the data sets' checksums, the attributes) are what a test sees.
void reseal(const fs::path& path) {
  const std::vector<char> bytes = read_all(path);
  ASSERT_GT(bytes.size(), antdt::checkpoint::kFileHeaderSize);
  const auto rest = std::as_bytes(std::span(bytes)).subspan(antdt::checkpoint::kFileHeaderSize);
  const std::vector<std::byte> header =
      antdt::checkpoint::render_file_header(bytes.size(), antdt::checkpoint::fnv1a64(rest));
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.write(reinterpret_cast<const char*>(header.data()), static_cast<std::streamsize>(header.size()));
  ASSERT_TRUE(f.good());
}

// File offset of a contiguous data set's raw bytes, found with plain HDF5.
std::uint64_t data_offset(const fs::path& path, const char* name) {
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  const hid_t dset = H5Dopen2(file, name, H5P_DEFAULT);
  const haddr_t offset = H5Dget_offset(dset);
  H5Dclose(dset);
  H5Fclose(file);
  EXPECT_NE(offset, HADDR_UNDEF);
  return offset;
}

}  // namespace

TEST(Fnv1a64, MatchesReferenceValues) {
  using antdt::checkpoint::fnv1a64;
  auto hash = [](const char* s) { return fnv1a64({reinterpret_cast<const std::byte*>(s), std::strlen(s)}); };
  EXPECT_EQ(hash(""), 0xcbf29ce484222325ULL);
  EXPECT_EQ(hash("a"), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(hash("foobar"), 0x85944171f73967e8ULL);
}

TEST_F(Checkpoint, RoundTripsEveryType) {
  const std::vector<float> floats = {1.5f, -0.0f, std::numeric_limits<float>::infinity(),
                                     std::numeric_limits<float>::denorm_min(), 3.25e30f};
  const std::vector<std::int64_t> int64s = {std::numeric_limits<std::int64_t>::min(), -1, 0,
                                            std::numeric_limits<std::int64_t>::max()};
  const std::vector<std::uint64_t> uint64s = {0, 1, std::numeric_limits<std::uint64_t>::max(), 0x9e3779b97f4a7c15ULL};
  std::vector<std::byte> bytes(300);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::byte>(i * 7);
  const std::string with_nuls("a\0b\0", 4);

  std::string path;
  {
    CheckpointWriter w(dir_.string(), 42);
    EXPECT_EQ(w.step(), 42);
    w.put_floats("model/params", floats);
    w.put_int64s("model/shape", int64s);
    w.put_uint64s("rng/rank0", uint64s);
    w.put_bytes("dds/ledger", bytes);
    w.put_int64("train/epoch", -7);
    w.put_double("train/lr", 0.1);
    w.put_string("meta/policy", "dd");
    w.put_string("meta/empty", "");
    w.put_string("meta/nuls", with_nuls);
    w.put_string("meta/utf8", "π ≈ 3.14");
    w.put_floats("empty/floats", std::vector<float>{});
    w.put_int64s("empty/int64s", std::vector<std::int64_t>{});
    w.put_uint64s("empty/uint64s", std::vector<std::uint64_t>{});
    w.put_bytes("empty/bytes", std::vector<std::byte>{});
    w.put_int64("top", 5);
    w.put_double("a/b/c/d/deep", -2.5);
    path = w.commit();
  }
  EXPECT_EQ(path, (dir_ / "ckpt-00000042.h5").string());

  CheckpointReader r(path);
  EXPECT_EQ(r.path(), path);
  EXPECT_EQ(r.step(), 42);
  EXPECT_EQ(r.format_version(), antdt::kCheckpointFormatVersion);
  EXPECT_EQ(r.antdt_version(), ANTDT_VERSION_STRING);

  const auto f = r.floats("model/params", 5);
  ASSERT_EQ(f.size(), floats.size());
  EXPECT_EQ(std::memcmp(f.data(), floats.data(), f.size() * sizeof(float)), 0) << "bit-exact, including -0.0";
  EXPECT_EQ(r.int64s("model/shape"), int64s);
  EXPECT_EQ(r.uint64s("rng/rank0", 4), uint64s);
  EXPECT_EQ(r.bytes("dds/ledger"), bytes);
  EXPECT_EQ(r.int64("train/epoch"), -7);
  EXPECT_EQ(r.real("train/lr"), 0.1);
  EXPECT_EQ(r.string("meta/policy"), "dd");
  EXPECT_EQ(r.string("meta/empty"), "");
  EXPECT_EQ(r.string("meta/nuls"), with_nuls);
  EXPECT_EQ(r.string("meta/utf8"), "π ≈ 3.14");
  EXPECT_TRUE(r.floats("empty/floats", 0).empty());
  EXPECT_TRUE(r.int64s("empty/int64s").empty());
  EXPECT_TRUE(r.uint64s("empty/uint64s").empty());
  EXPECT_TRUE(r.bytes("empty/bytes").empty());
  EXPECT_EQ(r.int64("top"), 5);
  EXPECT_EQ(r.real("a/b/c/d/deep"), -2.5);

  EXPECT_TRUE(r.has("model/params"));
  EXPECT_TRUE(r.has("a/b/c/d/deep"));
  EXPECT_FALSE(r.has("model")) << "a group is not an entry";
  EXPECT_FALSE(r.has("model/nope"));
  EXPECT_FALSE(r.has("nope/params"));
  EXPECT_FALSE(r.has("top/below"));
  EXPECT_FALSE(r.has("bad//name"));
  const std::vector<std::string> expected_names = {"a/b/c/d/deep", "dds/ledger",    "empty/bytes",  "empty/floats",
                                                   "empty/int64s", "empty/uint64s", "meta/empty",   "meta/nuls",
                                                   "meta/policy",  "meta/utf8",     "model/params", "model/shape",
                                                   "rng/rank0",    "top",           "train/epoch",  "train/lr"};
  EXPECT_EQ(r.names(), expected_names);
  EXPECT_NO_THROW(r.verify());

  CheckpointReader moved(std::move(r));
  EXPECT_EQ(moved.int64("top"), 5);
}

TEST_F(Checkpoint, DirectoryLockExcludesASecondHolderAndNamesTheFirst) {
  // flock locks belong to an open file description, so a second lock in this very process is
  // refused as one in another process would be.
  std::optional<CheckpointDirectoryLock> first(std::in_place, dir_.string());
  EXPECT_TRUE(first->held());
  try {
    CheckpointDirectoryLock second(dir_.string());
    ADD_FAILURE() << "a second lock of one directory was granted";
  } catch (const FileError& e) {
    expect_message(e.what(), dir_.string(), {"in use by another run", ("pid " + std::to_string(::getpid())).c_str()});
  }
  first.reset();
  CheckpointDirectoryLock again(dir_.string());  // released with its holder
  EXPECT_TRUE(again.held());
  EXPECT_TRUE(is_checkpoint_store_name("antdt.lock"));
  EXPECT_TRUE(is_checkpoint_store_name("antdt-run"));
  EXPECT_TRUE(is_checkpoint_store_name("ckpt-00000007.h5"));
  EXPECT_TRUE(is_checkpoint_store_name(".ckpt-7.h5.tmp"));
  EXPECT_FALSE(is_checkpoint_store_name("summary.json"));
}

TEST_F(Checkpoint, RunIdentityRoundTripsAndNamesWhatDiffers) {
  fs::create_directories(dir_);
  EXPECT_FALSE(read_run_identity(dir_.string()).has_value());
  RunIdentity mine{{{"data", "/d/train.h5"}, {"model_shape", "8,16,4"}, {"model_seed", "1"}}};
  write_run_identity(dir_.string(), mine);
  const auto back = read_run_identity(dir_.string());
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->fields, mine.fields);
  EXPECT_EQ(describe_difference(*back, mine), "");
  RunIdentity other = mine;
  other.fields[1].second = "8,32,4";
  other.fields.pop_back();
  other.fields.emplace_back("optimizer", "adam");
  EXPECT_EQ(describe_difference(mine, other),
            "model_shape: 8,16,4 there, 8,32,4 here; model_seed: 1 there, (none) here; optimizer: (none) there, adam "
            "here");
  EXPECT_THROW(write_run_identity(dir_.string(), RunIdentity{{{"Bad Key", "x"}}}), UsageError);
  EXPECT_THROW(write_run_identity(dir_.string(), RunIdentity{{{"key", "two\nlines"}}}), UsageError);
  {
    std::ofstream f(dir_ / "antdt-run");
    f << "data = x\nnot a key value line\n";
  }
  expect_message(error_of([&] { (void)read_run_identity(dir_.string()); }), "antdt-run", {"line 2"});
}

TEST_F(Checkpoint, RemoveCheckpointsDeletesOnlyTheStoresCheckpoints) {
  for (std::int64_t step : {3, 6}) (void)commit_step(step, 5);
  { std::ofstream(dir_ / "notes.txt") << "mine"; }
  { std::ofstream(dir_ / ".ckpt-9.h5.tmp") << "half"; }
  remove_checkpoints(dir_.string());
  EXPECT_EQ(file_names(), std::vector<std::string>{"notes.txt"});
}

TEST_F(Checkpoint, NothingVisibleBeforeCommit) {
  CheckpointWriter w(dir_.string(), 7);
  w.put_int64("x", 1);
  EXPECT_TRUE(antdt::list_checkpoints(dir_.string()).empty());
  EXPECT_FALSE(antdt::find_latest_checkpoint(dir_.string()).has_value());
  EXPECT_EQ(file_names(), std::vector<std::string>{".ckpt-7.h5.tmp"});
  const std::string path = w.commit();
  EXPECT_EQ(file_names(), std::vector<std::string>{"ckpt-00000007.h5"});
  EXPECT_EQ(antdt::find_latest_checkpoint(dir_.string()), path);
}

TEST_F(Checkpoint, RetentionKeepsTheNewestKeep) {
  for (int step = 1; step <= 5; ++step) commit_step(step * 10);
  EXPECT_EQ(file_names(), (std::vector<std::string>{"ckpt-00000030.h5", "ckpt-00000040.h5", "ckpt-00000050.h5"}));
  commit_step(60, 1);
  EXPECT_EQ(file_names(), std::vector<std::string>{"ckpt-00000060.h5"});
  // Steps past 8 digits still sort by number, not by name.
  commit_step(123456789, 2);
  const auto listed = antdt::list_checkpoints(dir_.string());
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(fs::path(listed[0]).filename(), "ckpt-00000060.h5");
  EXPECT_EQ(fs::path(listed[1]).filename(), "ckpt-123456789.h5");
}

TEST_F(Checkpoint, CommitRemovesCheckpointsOfAnAbandonedRun) {
  commit_step(10);
  commit_step(20);
  commit_step(30);
  // Training resumed from step 10 and now checkpoints step 15: 20 and 30 are stale.
  const std::string path = commit_step(15);
  EXPECT_EQ(file_names(), (std::vector<std::string>{"ckpt-00000010.h5", "ckpt-00000015.h5"}));
  EXPECT_EQ(antdt::find_latest_checkpoint(dir_.string()), path);
}

TEST_F(Checkpoint, SameStepIsReplaced) {
  {
    CheckpointWriter w(dir_.string(), 5);
    w.put_int64("value", 1);
    w.commit();
  }
  {
    CheckpointWriter w(dir_.string(), 5);
    w.put_int64("value", 2);
    w.commit();
  }
  EXPECT_EQ(file_names(), std::vector<std::string>{"ckpt-00000005.h5"});
  EXPECT_EQ(CheckpointReader((dir_ / "ckpt-00000005.h5").string()).int64("value"), 2);
}

TEST_F(Checkpoint, UncommittedWriterLeavesNothingBehind) {
  const std::string first = commit_step(1);
  {
    CheckpointWriter w(dir_.string(), 2);
    w.put_floats("model/params", std::vector<float>(1000, 2.0f));
    // Destroyed without commit, as when an exception unwinds the Session.
  }
  EXPECT_EQ(file_names(), std::vector<std::string>{"ckpt-00000001.h5"});
  ASSERT_EQ(antdt::find_latest_checkpoint(dir_.string()), first);
  EXPECT_EQ(CheckpointReader(first).floats("model/params", 16), std::vector<float>(16, 1.0f));

  // Move-assigning over an uncommitted writer discards its file too.
  CheckpointWriter a(dir_.string(), 3);
  CheckpointWriter b(dir_.string(), 4);
  a = std::move(b);
  EXPECT_EQ(file_names(), (std::vector<std::string>{".ckpt-4.h5.tmp", "ckpt-00000001.h5"}));
  a.put_int64("x", 4);
  EXPECT_EQ(fs::path(a.commit()).filename(), "ckpt-00000004.h5");
}

TEST_F(Checkpoint, CrashedWriteIsIgnoredAndFallsBack) {
  const std::string first = commit_step(1);
  // A crash mid-write leaves a real, half-written temporary file: copy one while it is open.
  {
    CheckpointWriter w(dir_.string(), 2);
    w.put_floats("model/params", std::vector<float>(16, 2.0f));
    fs::copy_file(dir_ / ".ckpt-2.h5.tmp", dir_ / "crash.copy");
  }
  fs::rename(dir_ / "crash.copy", dir_ / ".ckpt-2.h5.tmp");
  EXPECT_EQ(antdt::list_checkpoints(dir_.string()), std::vector<std::string>{first});
  testing::internal::CaptureStderr();
  EXPECT_EQ(antdt::find_latest_checkpoint(dir_.string()), first);
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find(".ckpt-2.h5.tmp"), std::string::npos) << "the ignored file is named: " << log;

  // The next commit cleans the stale temporary file up.
  commit_step(3);
  EXPECT_EQ(file_names(), (std::vector<std::string>{"ckpt-00000001.h5", "ckpt-00000003.h5"}));
}

TEST_F(Checkpoint, DamagedNewestFallsBackToPrevious) {
  const std::string first = commit_step(1);
  const std::string truncated = commit_step(2);
  const std::string corrupt = commit_step(3);
  const std::string not_hdf5 = (dir_ / "ckpt-00000004.h5").string();
  fs::resize_file(truncated, fs::file_size(truncated) / 2);
  flip_byte(corrupt, data_offset(corrupt, "model/params") + 5);
  std::ofstream(not_hdf5) << "not a checkpoint\n";

  testing::internal::CaptureStderr();
  EXPECT_EQ(antdt::find_latest_checkpoint(dir_.string()), first);
  const std::string log = testing::internal::GetCapturedStderr();
  for (const std::string& bad : {truncated, corrupt, not_hdf5}) {
    EXPECT_NE(log.find(bad), std::string::npos) << "warning names " << bad << ": " << log;
  }
  EXPECT_NE(log.find("checksum"), std::string::npos) << log;

  fs::remove(first);
  testing::internal::CaptureStderr();
  EXPECT_FALSE(antdt::find_latest_checkpoint(dir_.string()).has_value());
  testing::internal::GetCapturedStderr();
  EXPECT_FALSE(antdt::find_latest_checkpoint((dir_ / "no-such-dir").string()).has_value());
  EXPECT_TRUE(antdt::list_checkpoints((dir_ / "no-such-dir").string()).empty());
}

TEST_F(Checkpoint, WrongFormatVersionIsReported) {
  const std::string path = commit_step(1);
  {
    const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    const hid_t attr = H5Aopen(file, "antdt_format_version", H5P_DEFAULT);
    const std::int64_t future = 99;
    ASSERT_GE(H5Awrite(attr, H5T_NATIVE_INT64, &future), 0);
    H5Aclose(attr);
    H5Fclose(file);
  }
  reseal(path);
  expect_message(error_of([&] { CheckpointReader r(path); }), path, {"format version 99", "reads only version 1"});
}

TEST_F(Checkpoint, MissingCompletenessMarkerIsReported) {
  const std::string path = commit_step(1);
  {
    const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(H5Adelete(file, "antdt_complete"), 0);
    H5Fclose(file);
  }
  reseal(path);
  expect_message(error_of([&] { CheckpointReader r(path); }), path, {"completeness marker"});
}

TEST_F(Checkpoint, TruncatedFileIsReported) {
  const std::string path = commit_step(1);
  const fs::path copy = dir_ / "copy.h5";  // a name without "truncated" in it
  fs::copy_file(path, copy);
  fs::resize_file(copy, fs::file_size(copy) - 100);
  expect_message(error_of([&] { CheckpointReader r(copy.string()); }), copy.string(), {"truncated"});
}

TEST_F(Checkpoint, CorruptMetadataIsReported) {
  // The superblock (v2, after antdt's 512-byte header) ends in a checksum at bytes 44..47.
  const std::string path = commit_step(1);
  flip_byte(path, antdt::checkpoint::kFileHeaderSize + 45);
  expect_message(error_of([&] { CheckpointReader r(path); }), path, {"fails its file checksum"});
  // Past the file checksum (a buggy writer), HDF5's own metadata checksum still catches it.
  reseal(path);
  expect_message(error_of([&] { CheckpointReader r(path); }), path,
                 {"cannot be opened by HDF5", "incorrect metadata checksum"});
}

TEST_F(Checkpoint, FileChecksumIsCheckedBeforeHdf5) {
  const std::string path = commit_step(1);
  EXPECT_TRUE(CheckpointReader(path).has_file_checksum());
  const std::vector<char> good = read_all(path);
  ASSERT_EQ(good.size(), fs::file_size(path));
  const std::string header(good.data(), antdt::checkpoint::kFileHeaderSize);
  EXPECT_EQ(header.rfind("antdt checkpoint\nsize " + std::to_string(good.size()) + "\nfnv1a64 ", 0), 0u) << header;
  EXPECT_EQ(header.find_first_not_of('\0', header.find('\n', header.find("fnv1a64")) + 1), std::string::npos)
      << "NUL padding after the three lines";
  const auto restore = [&] {
    std::ofstream(path, std::ios::binary | std::ios::trunc)
        .write(good.data(), static_cast<std::streamsize>(good.size()));
  };
  // One flipped bit anywhere (header text, padding, superblock, metadata, data, the last byte)
  // is caught by the raw check, before HDF5 opens the file.
  const std::uint64_t size = good.size();
  for (const std::uint64_t offset :
       {std::uint64_t{0}, std::uint64_t{5}, std::uint64_t{20}, std::uint64_t{30}, std::uint64_t{45}, std::uint64_t{300},
        std::uint64_t{511}, std::uint64_t{512}, std::uint64_t{600}, size / 2, size - 1}) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(offset));
    const char flipped = static_cast<char>(good[offset] ^ 0x10);
    f.write(&flipped, 1);
    f.close();
    const antdt::checkpoint::FileCheck check = antdt::checkpoint::check_file(path);
    EXPECT_EQ(check.result, antdt::checkpoint::FileCheck::Result::damaged) << "flip at " << offset;
    const std::string message = error_of([&] { CheckpointReader r(path); });
    expect_message(message, path, {"restore an older checkpoint"});
    EXPECT_EQ(message.find("HDF5 ("), std::string::npos) << "HDF5 never saw it: " << message;
    restore();
  }
  EXPECT_EQ(antdt::checkpoint::check_file(path).result, antdt::checkpoint::FileCheck::Result::intact);
  { std::ofstream(path, std::ios::binary | std::ios::app) << "x"; }
  expect_message(error_of([&] { CheckpointReader r(path); }), path, {"bytes but its header records"});
  restore();
  fs::resize_file(path, 300);
  expect_message(error_of([&] { CheckpointReader r(path); }), path, {"truncated", "less than its own header"});
}

TEST_F(Checkpoint, CheckpointWithoutFileChecksumIsStillRead) {
  // A checkpoint from before antdt stored file checksums: an HDF5 file from offset 0 (h5unjam's
  // job, done here by hand with HDF5: the same entries and attributes, no user block).
  fs::create_directories(dir_);
  const fs::path old = dir_ / "ckpt-00000001.h5";
  {
    const hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST);
    const hid_t file = H5Fcreate(old.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    const hid_t scalar = H5Screate(H5S_SCALAR);
    const auto int_attr = [&](hid_t on, const char* name, std::uint64_t value, hid_t type) {
      const hid_t a = H5Acreate2(on, name, type, scalar, H5P_DEFAULT, H5P_DEFAULT);
      H5Awrite(a, type == H5T_STD_U64LE ? H5T_NATIVE_UINT64 : H5T_NATIVE_INT64, &value);
      H5Aclose(a);
    };
    const hid_t str = H5Tcopy(H5T_C_S1);
    const std::string version = ANTDT_VERSION_STRING;
    H5Tset_size(str, version.size());
    const hid_t va = H5Acreate2(file, "antdt_version", str, scalar, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(va, str, version.data());
    H5Aclose(va);
    int_attr(file, "antdt_format_version", 1, H5T_STD_I64LE);
    int_attr(file, "step", 1, H5T_STD_I64LE);
    int_attr(file, "antdt_complete", 1, H5T_STD_I64LE);
    const std::int64_t value = 77;
    const hid_t dset = H5Dcreate2(file, "value", H5T_NATIVE_INT64, scalar, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(dset, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, &value);
    int_attr(dset, "antdt_fnv1a64", antdt::checkpoint::fnv1a64(std::as_bytes(std::span(&value, 1))), H5T_STD_U64LE);
    H5Dclose(dset);
    H5Tclose(str);
    H5Sclose(scalar);
    H5Fclose(file);
    H5Pclose(fapl);
  }
  EXPECT_EQ(antdt::checkpoint::check_file(old.string()).result, antdt::checkpoint::FileCheck::Result::legacy);
  testing::internal::CaptureStderr();
  EXPECT_EQ(antdt::find_latest_checkpoint(dir_.string()), old.string());
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("stored no file checksum"), std::string::npos) << "one warning says so: " << log;
  CheckpointReader r(old.string());
  EXPECT_FALSE(r.has_file_checksum());
  EXPECT_EQ(r.int64("value"), 77);
  // The next checkpoint of the run carries one.
  EXPECT_TRUE(CheckpointReader(commit_step(2)).has_file_checksum());
}

TEST_F(Checkpoint, NonHdf5AndMissingFilesAreReported) {
  fs::create_directories(dir_);
  const std::string text = (dir_ / "ckpt-00000001.h5").string();
  std::ofstream(text) << "hello\n";
  expect_message(error_of([&] { CheckpointReader r(text); }), text, {"not an HDF5 file"});
  const std::string missing = (dir_ / "missing.h5").string();
  expect_message(error_of([&] { CheckpointReader r(missing); }), missing, {"does not exist"});
  expect_message(error_of([&] { CheckpointReader r(dir_.string()); }), dir_.string(), {"not a regular file"});
}

TEST_F(Checkpoint, MissingEntryIsReported) {
  const std::string path = commit_step(1);
  CheckpointReader r(path);
  expect_message(error_of([&] { (void)r.floats("model/missing"); }), path, {"'model/missing'", "is missing"});
  expect_message(error_of([&] { (void)r.floats("optimizer/state"); }), path, {"no group 'optimizer'"});
  expect_message(error_of([&] { (void)r.int64("train/step/x"); }), path, {"'train/step' is not a group"});
  expect_message(error_of([&] { (void)r.floats("model"); }), path, {"is a group, not a data set"});
  EXPECT_THROW((void)r.floats("/model/params"), UsageError) << "an invalid name is a usage error";
}

TEST_F(Checkpoint, ShapeMismatchIsReported) {
  const std::string path = commit_step(1);
  CheckpointReader r(path);
  EXPECT_EQ(r.floats("model/params", 16).size(), 16u);
  expect_message(error_of([&] { (void)r.floats("model/params", 17); }), path,
                 {"'model/params'", "has 16 elements, expected 17"});
  expect_message(error_of([&] { (void)r.floats("model/params", 0); }), path, {"expected 0"});
}

TEST_F(Checkpoint, WrongTypeIsReported) {
  std::string path;
  {
    CheckpointWriter w(dir_.string(), 1);
    w.put_int64s("ints", std::vector<std::int64_t>{1, 2, 3});
    w.put_int64("one", 1);
    w.put_uint64s("unsigned", std::vector<std::uint64_t>{1});
    w.put_string("text", "abc");
    path = w.commit();
  }
  CheckpointReader r(path);
  expect_message(error_of([&] { (void)r.floats("ints"); }), path,
                 {"'ints'", "wrong type", "int64[3]", "expected float32[]"});
  expect_message(error_of([&] { (void)r.int64s("one"); }), path, {"int64 scalar", "expected int64[]"});
  expect_message(error_of([&] { (void)r.int64("ints"); }), path, {"expected int64 scalar"});
  expect_message(error_of([&] { (void)r.int64s("unsigned"); }), path, {"uint64[1]", "expected int64[]"});
  expect_message(error_of([&] { (void)r.bytes("text"); }), path, {"string(3) scalar"});
  expect_message(error_of([&] { (void)r.real("one"); }), path, {"expected float64 scalar"});
  expect_message(error_of([&] { (void)r.string("one"); }), path, {"expected string"});
}

TEST_F(Checkpoint, FlippedDataByteFailsTheChecksum) {
  std::string path;
  {
    CheckpointWriter w(dir_.string(), 1);
    w.put_floats("model/params", std::vector<float>(1024, 0.5f));
    w.put_string("meta/policy", "static");
    path = w.commit();
  }
  flip_byte(path, data_offset(path, "model/params") + 2047);
  flip_byte(path, data_offset(path, "meta/policy") + 1);
  expect_message(error_of([&] { CheckpointReader r(path); }), path, {"fails its file checksum"});
  reseal(path);              // past the file checksum (a buggy writer): the data sets' own catch it
  CheckpointReader r(path);  // structure is intact: opening succeeds
  expect_message(error_of([&] { (void)r.floats("model/params"); }), path,
                 {"'model/params'", "fails its checksum", "corrupt"});
  expect_message(error_of([&] { (void)r.string("meta/policy"); }), path, {"'meta/policy'", "checksum"});
  expect_message(error_of([&] { r.verify(); }), path, {"checksum"});
}

TEST_F(Checkpoint, DataSetWithoutChecksumIsReported) {
  const std::string path = commit_step(1);
  {
    const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    const hsize_t dims[1] = {2};
    const hid_t space = H5Screate_simple(1, dims, nullptr);
    const hid_t dset = H5Dcreate2(file, "foreign", H5T_NATIVE_FLOAT, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    const float values[2] = {1, 2};
    H5Dwrite(dset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values);
    H5Dclose(dset);
    H5Sclose(space);
    H5Fclose(file);
  }
  reseal(path);
  CheckpointReader r(path);
  expect_message(error_of([&] { (void)r.floats("foreign"); }), path, {"'foreign'", "no 'antdt_fnv1a64' checksum"});
}

TEST_F(Checkpoint, ImplausibleSizeIsReportedNotAllocated) {
  // A data set claiming 2^40 floats (4 TiB) in a file of a few KiB: the reader must refuse
  // before allocating, not die of bad_alloc.
  const std::string path = commit_step(1);
  {
    const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    const hsize_t dims[1] = {hsize_t{1} << 40};
    const hid_t space = H5Screate_simple(1, dims, nullptr);
    const hid_t dset = H5Dcreate2(file, "huge", H5T_NATIVE_FLOAT, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    const hid_t attr_space = H5Screate(H5S_SCALAR);
    const hid_t attr = H5Acreate2(dset, "antdt_fnv1a64", H5T_STD_U64LE, attr_space, H5P_DEFAULT, H5P_DEFAULT);
    const std::uint64_t checksum = 0;
    H5Awrite(attr, H5T_NATIVE_UINT64, &checksum);
    H5Aclose(attr);
    H5Sclose(attr_space);
    H5Dclose(dset);
    H5Sclose(space);
    H5Fclose(file);
  }
  reseal(path);
  CheckpointReader r(path);
  expect_message(error_of([&] { (void)r.floats("huge"); }), path, {"'huge'", "more than the whole file holds"});
}

TEST_F(Checkpoint, MisuseIsAUsageError) {
  EXPECT_THROW(CheckpointWriter(dir_.string(), -1), UsageError);
  CheckpointWriter w(dir_.string(), 1);
  for (const char* bad : {"", "/a", "a/", "a//b", "a b", "..", "a/./b", "tab\t"}) {
    EXPECT_THROW(w.put_int64(bad, 1), UsageError) << "'" << bad << "'";
  }
  w.put_int64("a/b", 1);
  EXPECT_THROW(w.put_int64("a/b", 2), UsageError) << "put twice";
  EXPECT_THROW(w.put_int64("a", 2), UsageError) << "a is a group";
  EXPECT_THROW(w.put_int64("a/b/c", 2), UsageError) << "a/b is a data set";
  w.put_int64("a/c", 3);  // a group is reused
  EXPECT_THROW(w.commit(0), UsageError);
  w.commit();
  EXPECT_THROW(w.put_int64("z", 1), UsageError) << "put after commit";
  EXPECT_THROW(w.commit(), UsageError) << "commit twice";
  CheckpointReader r((dir_ / "ckpt-00000001.h5").string());
  EXPECT_EQ(r.int64("a/c"), 3);
}

TEST_F(Checkpoint, UnwritableDirectoryIsAFileError) {
  fs::create_directories(dir_);
  const fs::path blocker = dir_ / "file";
  std::ofstream(blocker) << "x";
  EXPECT_THROW(CheckpointWriter((blocker / "sub").string(), 1), antdt::FileError);
}

// Not a speed assertion: prints the cost of a 10 MB checkpoint for the record.
TEST_F(Checkpoint, MeasuresTenMegabyteWriteAndRead) {
  using Clock = std::chrono::steady_clock;
  const std::size_t count = 10u * 1024 * 1024 / sizeof(float);
  std::vector<float> params(count);
  std::iota(params.begin(), params.end(), 0.0f);
  const auto t0 = Clock::now();
  std::string path;
  {
    CheckpointWriter w(dir_.string(), 1);
    w.put_floats("model/params", params);
    w.put_int64("train/step", 1);
    path = w.commit();
  }
  const auto t1 = Clock::now();
  CheckpointReader r(path);
  const auto loaded = r.floats("model/params", static_cast<std::int64_t>(count));
  const auto t2 = Clock::now();
  r.verify();
  const auto t3 = Clock::now();
  ASSERT_EQ(loaded, params);
  const auto bytes = std::vector<std::byte>(reinterpret_cast<const std::byte*>(params.data()),
                                            reinterpret_cast<const std::byte*>(params.data() + count));
  const auto t4 = Clock::now();
  const auto hash = antdt::checkpoint::fnv1a64(bytes);
  const auto t5 = Clock::now();
  auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
  const double mb = static_cast<double>(count * sizeof(float)) / 1e6;
  std::printf(
      "[ckpt-bench] %.1f MB checkpoint: write+commit (incl. fsync) %.1f ms (%.0f MB/s), "
      "open+read %.1f ms (%.0f MB/s), verify %.1f ms, fnv1a64 alone %.1f ms (%.0f MB/s) [hash %016llx]\n",
      mb, ms(t1 - t0), mb / (ms(t1 - t0) / 1e3), ms(t2 - t1), mb / (ms(t2 - t1) / 1e3), ms(t3 - t2), ms(t5 - t4),
      mb / (ms(t5 - t4) / 1e3), static_cast<unsigned long long>(hash));
}

// A disk that fills up under a checkpoint (here: a file-size limit, so that every write past
// 64 KiB fails with EFBIG, as a full disk fails with ENOSPC) fails the commit with one
// WriteError naming the cause, leaves no file behind, and leaves the HDF5 library in a state
// that closes cleanly: HDF5 1.10 kept a file whose close had failed in its tables, and closing
// the library (at exit, or in MPI_Finalize) then crashed on it.
//
// This runs in the death test's child: a commit under a 64 KiB file-size limit, then HDF5's close.
[[noreturn]] void commit_into_a_full_disk(const fs::path& dir) {
  ::signal(SIGXFSZ, SIG_IGN);
  const rlimit limit{64 * 1024, 64 * 1024};
  if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) std::_Exit(10);
  const std::vector<float> params(1 << 20, 1.0f);  // 4 MiB
  std::string message;
  try {
    CheckpointWriter w(dir.string(), 2);
    w.put_floats("model/params", params);
    w.put_int64("train/step", 2);
    w.commit();
  } catch (const antdt::WriteError& e) {
    message = e.what();
  }
  std::fprintf(stderr, "message: '%s'\n", message.c_str());
  if (message.find("File too large") == std::string::npos) std::_Exit(11);
  if (message.find("previous checkpoints kept") == std::string::npos) std::_Exit(12);
  if (H5close() < 0) std::_Exit(13);
  std::fprintf(stderr, "HDF5 closed cleanly\n");
  std::_Exit(0);
}

TEST_F(Checkpoint, AFullDiskFailsTheCommitAndLeavesHdf5Closable) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // MPI's and HDF5's threads may be running
  commit_step(1);
  EXPECT_EXIT(commit_into_a_full_disk(dir_), testing::ExitedWithCode(0), "File too large.*\n.*HDF5 closed cleanly");
  EXPECT_EQ(file_names(), std::vector<std::string>{"ckpt-00000001.h5"});
}
