// tools/redlock-run/help.cpp: the --help and --version texts (see options.hpp). The help text is
// the one reference for the options and the exit statuses; the man page follows it (a ctest
// checks that every option it names is in docs/redlock-run.1).
#include <cstdio>  // std::fputs

#include <redlock/version.hpp>  // REDLOCK_VERSION_STRING

#include "options.hpp"

namespace redlock_run {
namespace {

const char kUsage[] = R"(Usage: redlock-run [OPTIONS] [--] COMMAND [ARGS...]
       redlock-run [OPTIONS] --hold
       redlock-run [OPTIONS] --status
       redlock-run [OPTIONS] --leader
       redlock-run [OPTIONS] --elect ID [--] COMMAND [ARGS...]

Run a command while holding a Redis lock: flock(1) for a fleet.

Servers (one is a plain lock; several form a Redlock, held when N/2+1 of them grant it):
  --redis URI           redis://[user[:password]@]host[:port][/db][?command_timeout=ms
                        &connect_timeout=ms], rediss://... (TLS, verified; ?cacert=FILE,
                        &cert=FILE&key=FILE, &sni=NAME, &insecure=1),
                        unix:///path/to/sock, or through Sentinel
                        redis-sentinel://[:password@]s1[:port],s2[,...][?sentinel_password=
                        PW]#SERVICE (rediss-sentinel:// for TLS), or a Redis Cluster
                        redis-cluster://[user[:password]@]h1[:port],h2[,...]
                        (rediss-cluster:// for TLS); any of them takes
                        ?wait_replicas=N&wait_timeout=ms. Repeat for a Redlock.
  --redis-file PATH     Read server URIs from PATH, one a line (# after a space starts a
                        comment).
                        Without --redis and --redis-file: the REDLOCK_REDIS environment
                        variable (URIs separated by spaces or commas). Prefer these two for
                        a password: a URI on the command line shows in ps (we warn).
  --postgres URI        Hold the lock in PostgreSQL instead of Redis: a lease row in the table
                        redlock_leases (created if missing) of the database at URI,
                        postgresql://[user@]host[:port]/db[?...] (libpq's URI or key=value
                        string; PGPASSWORD and ~/.pgpass keep a password out of ps). --fair
                        queues in arrival order. Not with --redis, --redis-file, --status
                        or --limit. The fence (REDLOCK_FENCE) is always given: it comes
                        from a sequence.
  --zookeeper URI       Lock on ZooKeeper instead: zookeeper://host:port[,host:port...]
                        [/chroot][?session_timeout=ms]. The session is the lease (--ttl is
                        not used); waiters are served in order; the fence (the holder
                        znode's czxid) is always exported. Not with --redis, --limit,
                        --status.
Lock:
  --key KEY             Name of the lock (the Redis key); the command gets REDLOCK_KEY.
                        Also used: {KEY}:fence (--fencing), KEY:holder (host, pid and command
                        of the holder, for --status) and, with --fair, {KEY}:waiters*.
                        Repeated, the keys are held all or none, in one script (a MultiLock;
                        one server; the command gets the first as REDLOCK_KEY).
  --ttl DURATION        Lease on the server (default 30s, at least 100ms), renewed about
                        every ttl/3. If this host dies, the lock frees itself within a ttl.
  -w, --wait DURATION   Give up after this long if the lock is held elsewhere (exit 75).
                        Alias: --timeout. Default: wait forever.
  -n, --no-wait         One attempt: exit 75 at once if the lock is held elsewhere.
  --unavailable-timeout DURATION
                        How long a wait rides out servers that do not answer (a quorum of
                        them, for several) before exit 69 (default 10s; 0: at once).
  -E, --conflict-exit-code N
                        Exit N (0-255) instead of 75 when the lock is held elsewhere.
  --fencing             Issue a fencing token (a counter in {KEY}:fence that grows with every
                        hold); the command gets it as REDLOCK_FENCE.
  --fair                First come, first served among waiters (one server only; the
                        default for one Redis server, asked for with PostgreSQL).
  --limit N             A semaphore: at most N commands hold KEY at once, each with its own
                        lease, fence and renewal (one server only; not with --fair). Every
                        user of KEY must give the same N: it is stored with the permits, and
                        another N is refused (64) while a permit is held, and so is a run
                        on KEY without --limit (it would hold KEY beside them). Uses
                        {KEY}:permit:1..N, {KEY}:permit:fence, {KEY}:permit:released,
                        {KEY}:permit:limit and (its waiters' queue) {KEY}:permit:waiters.
  --shared              The read side of KEY: several --shared runs hold it at once, a plain
                        run (the write side) excludes them all (a waiting plain run does not
                        hold new ones back). Redis (one server or several) or --zookeeper;
                        not with --limit, --fair or --postgres.
  --exclusive           The write side of KEY with writer preference: while it waits, no new
                        --shared run enters, so a steady stream of readers cannot starve it
                        (a plain run can be). Use it for the writer of keys that --shared
                        runs read. Redis or --zookeeper; not with --limit, --fair,
                        --postgres. With several servers, neither side takes --fencing.
Command:
  --grace DURATION      After a lost lease or a forwarded stop signal, how long the command
                        and every process it started have between SIGTERM (or the signal)
                        and SIGKILL (default 10s).
  --hold                No command: print "held KEY fence N" on stdout once the lock is
                        held, and hold it until stdin closes (exit 0) or a signal.
  --status              Show whether KEY is held, its remaining ttl and its holder (or the
                        number of --shared readers holding it); for a semaphore (--limit N,
                        or the limit stored with its permits), how many permits are held and
                        each one's ttl; for an election, its leader and term. Exit 0 if held
                        (a permit, a leader), 1 if not.
  --leader              Print "ID TERM" of the leader of the election KEY (a
                        redlock::Election, on any store), exit 0; exit 1 if none leads
                        (none claimed, or its lease expired). An ID with white space, a
                        quote, a backslash or a control character is printed as a JSON
                        string ("pod 7").
  --format text|json    How --status and --leader print: lines (text, the default) or one
                        JSON object on one line, for scripts.
  --elect ID            A hot standby for the election KEY, as candidate ID: campaign, run
                        the command while leading (with REDLOCK_TERM and REDLOCK_FENCE, the
                        term), stop it like a lost lease when leadership is lost, and
                        campaign again. Exits when the command exits by itself (its status;
                        the next candidate takes over at once) or on a stop signal. ID has
                        no white space or control characters. One --key; not with --shared,
                        --exclusive, --limit, --fair, --wait, --no-wait or -E.
Output:
  -v, --verbose         Say on stderr when waiting, acquired (the kind of lock: Lock,
                        Redlock and its quorum, Semaphore and its limit; the fence or "no
                        fence"; the validity), renewals missed, lost.
  -q, --quiet           No message when the lock is held elsewhere (the exit status says
                        it). Errors and a lost lease are always reported.
  --metrics PATH        Write lock metrics in Prometheus text format (acquires, wait time,
                        renewals and their lateness, losses, node health) to PATH, at start
                        and at exit, atomically (for node_exporter's textfile collector).
  -h, --help            This text.   --version   The version and the key layout.

Our options end at the first word that is not one of them, or at --.
One mode at a time (a command, --hold, --status, --leader, --elect), and one kind of lock
(--shared, --exclusive, --limit, --fair, a repeated --key): other combinations exit 64.
--status and --leader take no --wait, --no-wait, -E, --fair or --fencing.
)";

const char kFooter[] = R"(
Exit status:
  N        the command's exit status
  128+N    the command was killed by signal N (or redlock-run got signal N while waiting)
  0        --hold: stdin closed; --status: the key is held; --leader: there is a leader
  1        --status: the key is not held; --leader: nobody leads
  64       usage error: bad option, duration, URI or key, options that cannot be
           combined, a --limit other than the one the holders of a semaphore's
           permits use, or no --limit on a semaphore's key while its permits are held
  69       unavailable: a server could not be reached or answered with an error (e.g. a
           wrong password), or a Redlock could not reach a quorum of servers
  70       the lease was lost while the command ran
  71       the command could not be started (fork or pipe failed)
  75       the lock is held elsewhere (--no-wait, or --wait expired); see -E
  126      the command is not executable
  127      the command was not found

The command runs in its own process group. A lost lease or a forwarded stop signal
(SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGALRM, ...) reaches the whole group and every process
the command started, also those that left the group (set -m jobs, setsid); what is still
running --grace later gets SIGKILL. SIGUSR1 and SIGUSR2 are passed on to the group only, and
ignored while waiting for the lock. When the command exits, what it left running gets SIGTERM
(SIGKILL after --grace). The lock is released only once every one of them is gone
(redlock-run is a child subreaper: no descendant escapes it).
A wait rides out servers that do not answer, and ends with 69 if they still do not when
--wait or --unavailable-timeout runs out.

The command's environment: REDLOCK_KEY=<key>, REDLOCK_TTL_MS=<ttl>,
REDLOCK_VALIDITY_MS=<validity left when it started> and, with --fencing, REDLOCK_FENCE=<n>
(with --elect also REDLOCK_TERM=<n>, the same number).
Durations: 250ms, 0.5s, 30s, 1m30s, 2h; a bare number is seconds.

Examples:
  REDLOCK_REDIS=redis://:secret@10.0.0.5:6379 redlock-run --key reports:nightly -n \
      -- ./nightly-report --since yesterday
  redlock-run --redis redis://r1 --redis redis://r2 --redis redis://r3 --key deploy:web \
      --wait 2m --fencing -- sh -c './deploy.sh --fence "$REDLOCK_FENCE"'
)";

}  // namespace

void print_help() {
  std::fputs(kUsage, stdout);
  std::fputs(kFooter, stdout);
}

// The first line is the version alone (scripts read it).
void print_version() {
  static_assert(REDLOCK_KEY_LAYOUT == 3, "describe the new key layout below");
  std::fputs(
      REDLOCK_VERSION_STRING
      "\nkey layout 3 (since 0.3.0): helper keys share the key's cluster slot, "
      "{KEY}:fence, {KEY}:waiters, {KEY}:permit:N, ...; 0.2 queued in {KEY}:queue (layout 2), "
      "0.1 used KEY:fence (layout 1), see docs/operations.md, \"Upgrading\"\n",
      stdout);
}

}  // namespace redlock_run
