// src/election/pg_election.cpp: redlock::postgres::Election (built into the PostgreSQL
// component). The lease is the PostgreSQL lock's row `<name>:leader` in the lease table (lease
// mode: the term is the row's fence, drawn from the table's sequence); the board is one more row,
// `<name>:leader:id`, whose token column holds the leader's token and id ("<token> <id>") and
// whose fence column its term.
// A claim writes it only while the lease row holds the claimant's token and is unexpired, and
// notifies the lock's channel; leader() joins the two rows on the fence, so a released, expired
// or unclaimed lease is never reported. Session mode (advisory locks) keeps no row to check
// against and is refused.
#include <stdexcept>
#include <utility>

#include <redlock/postgres.hpp>

#include "api/access.hpp"
#include "backends/postgres/pg_backend_base.hpp"
#include "election/election_core.hpp"
#include "election/settings.hpp"

namespace redlock {
namespace detail {
namespace {

class PgBoard final : public LeaderBoard {
 public:
  PgBoard(std::shared_ptr<PgDatabase> db, std::shared_ptr<LeaseBackend> lease)
      : db_(std::move(db)),
        lease_(std::move(lease)),
        record_(lease_->key() + ":id"),
        channel_(pg_channel(db_->table(), lease_->key())) {
    const std::string& t = db_->table();
    claim_sql_ =
        "WITH held AS (SELECT fence FROM " + t +
        " WHERE name = $1 AND token = $2 AND expires_at > clock_timestamp()), rec AS "
        "(INSERT INTO " +
        t +
        " (name, token, expires_at, fence) SELECT $3, $2 || ' ' || $4, to_timestamp(0), fence "
        "FROM held ON CONFLICT (name) DO UPDATE SET token = EXCLUDED.token, fence = "
        "EXCLUDED.fence RETURNING name) SELECT pg_notify($5, $1) FROM rec";
    read_sql_ =
        "SELECT l.fence, substr(r.token, length(l.token) + 2), ceil(extract(epoch FROM "
        "(l.expires_at - "
        "clock_timestamp())) * 1000)::bigint FROM " +
        t + " l JOIN " + t +
        " r ON r.name = $2 AND r.fence = l.fence AND left(r.token, length(l.token) + 1) = "
        "l.token || ' ' WHERE l.name = $1 AND l.token <> '' AND "
        "l.expires_at > clock_timestamp()";
  }

  bool claim(const std::string& token, std::uint64_t, const std::string& id) override {
    const PgResult r = db_->exec("claim " + lease_->key(), claim_sql_,
                                 {lease_->key(), token, record_, id, channel_});
    return r.affected == 1;
  }

  Sighting read(Look) override {
    const PgResult r = db_->exec("leader " + lease_->key(), read_sql_, {lease_->key(), record_});
    Sighting seen;
    if (r.affected != 1 || r.row.size() != 3) return seen;
    seen.leader = Leader{r.row[1], std::stoull(r.row[0])};
    seen.expires_in = std::chrono::milliseconds(std::stoll(r.row[2]));
    return seen;
  }

  // The lock's channel: claims announce a new leader there, and a release that hands over to
  // nobody announces "no leader" (a hand-over is followed by the grantee's claim).
  std::unique_ptr<ReleaseWatch> watch(SteadyClock::time_point deadline) override {
    return std::make_unique<PgWatch>(db_->listener(), channel_, deadline);
  }

 private:
  std::shared_ptr<PgDatabase> db_;
  std::shared_ptr<LeaseBackend> lease_;
  std::string record_;
  std::string channel_;
  std::string claim_sql_, read_sql_;
};

std::shared_ptr<ElectionCore> make_pg_election(const std::shared_ptr<PgDatabase>& db,
                                               std::string name, std::string id,
                                               ElectionOptions options) {
  check_election_names(name, id);
  check_pg_text(name, "name");
  check_pg_text(id, "id");
  if (db->options().mode != postgres::Mode::lease) {
    throw std::invalid_argument(
        "redlock: postgres::Election: the Database must be in lease mode (a session-mode "
        "advisory lock keeps no row to check the leader against)");
  }
  const LockOptions lock_options = election_lock_options(options);
  auto lease = make_pg_backend(db, name + ":leader", lock_options);
  auto board = std::make_shared<PgBoard>(db, lease);
  return std::make_shared<ElectionCore>(std::move(lease), lock_options, std::move(board),
                                        std::move(name), std::move(id), std::move(options));
}

}  // namespace
}  // namespace detail

namespace postgres {

Election::Election(Database& db, std::string name, std::string id, ElectionOptions options)
    : redlock::Election(
          detail::make_pg_election(db.impl_, std::move(name), std::move(id), std::move(options))) {}

}  // namespace postgres
}  // namespace redlock
