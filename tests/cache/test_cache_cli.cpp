// `qlinear run --weight-cache DIR` and `qlinear cache ls|verify|clear DIR` end to end on a real checkpoint.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cache/cache_test_util.hpp"
#include "cli_run.hpp"
#include "qlinear/safetensors.hpp"

namespace qlinear {
namespace {

using test_cli::CliRun;
using test_cli::fixture;
using test_cli::json_of;
using test_cli::run;

TEST(CacheCli, SecondRunHitsEveryLayer) {
  for (const char* ckpt : {"w8a8-int8-dynamic", "w8a16-mxfp8", "w4a4-nvfp4"}) {
    SCOPED_TRACE(ckpt);
    cache_test::ScratchDir dir(std::string("cli_") + ckpt);
    const std::string cmd = "run " + fixture(ckpt) + " --m 1 --reps 1 --weight-cache " + dir.str();
    CliRun first = run(cmd + " --json");
    ASSERT_EQ(first.code, 0) << first.out;
    const auto j1 = json_of(first.out);
    ASSERT_GE(j1.size(), 4u);
    for (const auto& rec : j1) {
      EXPECT_FALSE(rec["weight_cache"]["hit"].get<bool>()) << rec.dump();
      EXPECT_TRUE(rec["weight_cache"]["stored"].get<bool>()) << rec.dump();
      EXPECT_NE(rec["weight_cache"]["miss_reason"].get<std::string>().find("no entry"), std::string::npos);
    }
    CliRun second = run(cmd + " --json");
    ASSERT_EQ(second.code, 0) << second.out;
    const auto j2 = json_of(second.out);
    ASSERT_EQ(j2.size(), j1.size());
    for (const auto& rec : j2) {
      EXPECT_TRUE(rec["weight_cache"]["hit"].get<bool>()) << rec.dump();
      EXPECT_EQ(rec["weight_cache"]["process_ms"].get<double>(), 0.0);
      EXPECT_TRUE(rec["ok"].get<bool>()) << "checked against the reference after a hit: " << rec.dump();
    }
    // The table form says it per layer and in total.
    CliRun text = run(cmd);
    ASSERT_EQ(text.code, 0) << text.out;
    const std::string total = std::to_string(j2.size()) + " of " + std::to_string(j2.size()) + " layers hit";
    EXPECT_NE(text.out.find(total), std::string::npos) << text.out;
  }
}

TEST(CacheCli, LsVerifyClear) {
  cache_test::ScratchDir dir("cli_manage");
  ASSERT_EQ(run("run " + fixture("w8a8-int8-dynamic") + " --m 1 --reps 1 --no-check --weight-cache " + dir.str()).code, 0);
  CliRun ls = run("cache ls " + dir.str() + " --json");
  ASSERT_EQ(ls.code, 0) << ls.out;
  const auto entries = json_of(ls.out);
  ASSERT_GE(entries.size(), 4u);
  for (const auto& e : entries) {
    EXPECT_EQ(e["key"]["scheme"], "w8a8-int8-dynamic");
    EXPECT_FALSE(e["key"]["kernel"].get<std::string>().empty());
    EXPECT_EQ(e["key"]["tp_size"], "1");
  }
  CliRun verify = run("cache verify " + dir.str());
  EXPECT_EQ(verify.code, 0) << verify.out;
  EXPECT_NE(verify.out.find("0 of " + std::to_string(entries.size()) + " entries corrupt"), std::string::npos)
      << verify.out;

  // Flip a payload byte of one entry: verify fails and names it; the next run misses on it and repairs it.
  const std::string victim = entries[0]["path"];
  {
    auto f = SafetensorsFile::open(victim);
    ASSERT_TRUE(f);
    const SafetensorsEntry e = *f->entry(f->names().back());
    std::fstream io(victim, std::ios::in | std::ios::out | std::ios::binary);
    const auto at = static_cast<std::streamoff>(f->data_offset() + e.begin);
    io.seekg(at);
    char c = 0;
    io.read(&c, 1);
    c = static_cast<char>(c ^ 0x40);
    io.seekp(at);
    io.write(&c, 1);
  }
  CliRun bad = run("cache verify " + dir.str() + " --json");
  EXPECT_EQ(bad.code, 1) << bad.out;
  int corrupt = 0;
  for (const auto& e : json_of(bad.out)) {
    if (!e["ok"].get<bool>()) {
      ++corrupt;
      EXPECT_EQ(e["path"], victim);
      EXPECT_NE(e["problem"].get<std::string>().find("checksum mismatch"), std::string::npos) << e.dump();
    }
  }
  EXPECT_EQ(corrupt, 1);
  CliRun again = run("run " + fixture("w8a8-int8-dynamic") + " --m 1 --reps 1 --weight-cache " + dir.str() + " --json");
  ASSERT_EQ(again.code, 0) << again.out;
  int misses = 0;
  for (const auto& rec : json_of(again.out)) {
    if (!rec["weight_cache"]["hit"].get<bool>()) {
      ++misses;
      EXPECT_NE(rec["weight_cache"]["miss_reason"].get<std::string>().find("checksum mismatch"), std::string::npos);
    }
  }
  EXPECT_EQ(misses, 1);
  EXPECT_EQ(run("cache verify " + dir.str()).code, 0);

  std::ofstream(dir.path / "notes.txt") << "not an entry";
  CliRun clear = run("cache clear " + dir.str() + " --json");
  ASSERT_EQ(clear.code, 0) << clear.out;
  EXPECT_EQ(json_of(clear.out)["removed"].get<size_t>(), entries.size());
  EXPECT_TRUE(std::filesystem::exists(dir.path / "notes.txt"));
  EXPECT_EQ(json_of(run("cache ls " + dir.str() + " --json").out).size(), 0u);
}

TEST(CacheCli, BadUsageNamesWhatWasExpected) {
  CliRun none = run("cache");
  EXPECT_EQ(none.code, 2);
  EXPECT_NE(none.out.find("expected an action (ls, verify or clear) and DIR"), std::string::npos) << none.out;
  CliRun unknown = run("cache prune /tmp");
  EXPECT_EQ(unknown.code, 2);
  EXPECT_NE(unknown.out.find("unknown action 'prune'"), std::string::npos) << unknown.out;
  CliRun missing = run("cache ls /nonexistent/qlinear-cache");
  EXPECT_EQ(missing.code, 1);
  EXPECT_NE(missing.out.find("'/nonexistent/qlinear-cache' does not exist"), std::string::npos) << missing.out;
  CliRun help = run("cache --help");
  EXPECT_EQ(help.code, 0);
  EXPECT_NE(help.out.find("Usage: qlinear cache"), std::string::npos);
}

}  // namespace
}  // namespace qlinear
