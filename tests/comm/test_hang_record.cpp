// The hang record: the JSON names every rank with its host and what it last
// completed or is in, ranks that did not answer say so; the file is written
// once per process (the first hang), atomically, in a directory it creates;
// an unwritable path returns "" and leaves the next try free.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "comm/hang_record.h"
#include "comm/peer_status.h"

using namespace parallm::comm;
namespace fs = std::filesystem;

namespace {

HangRecord sample(const std::string& error) {
  HangRecord r;
  r.group = "dp";
  r.rank = 0;
  r.size = 2;
  r.operation = "all_reduce #14 (14560 x fp32, avg)";
  r.waited_s = 6.0;
  r.timeout_s = 5.0;
  r.error = error;
  PeerState me;
  me.rank = 0;
  me.world_rank = 0;
  me.host = "host0";
  me.answered = true;
  me.done = 13;
  me.done_kind = OpKind::AllReduce;
  me.seq = 14;
  me.kind = OpKind::AllReduce;
  me.count = 14560;
  PeerState lost;
  lost.rank = 1;
  lost.world_rank = 2;
  lost.host = "host1";
  r.ranks = {me, lost};
  return r;
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

TEST(HangRecord, JsonNamesEveryRankAndWhatItWasDoing) {
  const auto j = nlohmann::json::parse(hang_record_json(sample("lost host1")));
  EXPECT_EQ(j["group"], "dp");
  EXPECT_EQ(j["operation"], "all_reduce #14 (14560 x fp32, avg)");
  ASSERT_EQ(j["ranks"].size(), 2u);
  EXPECT_EQ(j["ranks"][0]["host"], "host0");
  EXPECT_EQ(j["ranks"][0]["last_completed"], "all_reduce #13");
  EXPECT_EQ(j["ranks"][0]["in_progress"], "all_reduce #14 (14560 elements)");
  EXPECT_EQ(j["ranks"][1]["host"], "host1");
  EXPECT_EQ(j["ranks"][1]["world_rank"], 2);
  EXPECT_FALSE(j["ranks"][1]["answered"].get<bool>());
  EXPECT_FALSE(j["ranks"][1].contains("last_completed"));
  EXPECT_EQ(j["error"], "lost host1");
}

TEST(HangRecord, WrittenOnceWhereSetInADirectoryItMakes) {
  const fs::path base = fs::temp_directory_path() / ("parallm_hang_" + std::to_string(::getpid()));
  fs::remove_all(base);
  fs::create_directories(base);
  std::ofstream(base / "file") << "x";
  set_hang_record_path((base / "file" / "hang.json").string());  // under a regular file: cannot be written
  EXPECT_EQ(write_hang_record(sample("first")), "");
  const fs::path path = base / "run" / "hang-host0-0.json";
  set_hang_record_path(path.string());
  EXPECT_EQ(write_hang_record(sample("second")), path.string());
  EXPECT_EQ(write_hang_record(sample("third")), path.string());  // the first hang is the telling one
  EXPECT_NE(slurp(path).find("\"second\""), std::string::npos);
  EXPECT_EQ(slurp(path).find("\"third\""), std::string::npos);
  for (const auto& e : fs::directory_iterator(base / "run")) EXPECT_EQ(e.path(), path) << "a temporary left behind";
  set_hang_record_path("");
  fs::remove_all(base);
}

TEST(PeerStatus, AnswersBecomeEveryRanksStateAndOneSentence) {
  const Places places = {{0, "host0"}, {1, "host0"}, {2, "host1"}, {3, "host1"}};
  std::map<int, StatusAnswer> got;
  got[1] = status_answer(13, OpKind::AllReduce, 14, OpKind::AllReduce, 8);  // in the same operation
  got[3] = status_answer(12, OpKind::Broadcast, 0, OpKind::Barrier, 0);     // idle
  const StatusAnswer mine = status_answer(13, OpKind::AllReduce, 14, OpKind::AllReduce, 8);
  const std::vector<PeerState> ranks = peer_states(4, 0, mine, got, places);
  ASSERT_EQ(ranks.size(), 4u);
  EXPECT_TRUE(ranks[0].answered);
  EXPECT_EQ(ranks[0].seq, 14u);
  EXPECT_FALSE(ranks[2].answered);
  EXPECT_EQ(ranks[2].host, "host1");
  EXPECT_EQ(ranks[2].world_rank, 2);
  EXPECT_EQ(ranks[3].done, 12u);
  EXPECT_EQ(ranks[3].done_kind, OpKind::Broadcast);
  EXPECT_EQ(ranks[3].seq, 0u);
  EXPECT_EQ(describe_answers(14, 4, 0, got, places, 1.0),
            "rank 3 is idle after collective #12; rank 2 on host host1 did not answer within 1.0 s (stopped, dead, or "
            "stuck outside communication: look at that process); rank 1 waiting in the same operation");
  got.erase(1);
  EXPECT_NE(describe_answers(14, 4, 0, got, places, 1.0).find("ranks 1,2 on hosts host0, host1 did not answer"),
            std::string::npos);
}

}  // namespace
