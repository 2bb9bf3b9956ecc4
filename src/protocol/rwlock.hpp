// src/protocol/rwlock.hpp: a ReadWriteLock's commands on the wire. The writer holds the lock key
// itself (a string, PX ttl); each reader holds an entry of its own in a sorted set scored by its
// lease's end on the server's clock (TIME), which every script purges, and while any reader
// holds, the key holds 'redlock:rw:readers' until the longest reader lease ends (so a plain
// Lock on the key is a writer: refused by readers, and refusing them); a waiting writer keeps a
// short-lived marker that stops new readers (writer preference). Pure: no I/O, no exceptions
// beyond std::bad_alloc.
#ifndef REDLOCK_SRC_PROTOCOL_RWLOCK_HPP
#define REDLOCK_SRC_PROTOCOL_RWLOCK_HPP

#include <string>
#include <string_view>

#include "io/command.hpp"
#include "protocol/multi.hpp"  // VarCommand, ScriptSend, MultiReply (read_multi_reply)

namespace redlock {
namespace detail {

// The names of read-write lock `key`; all share its slot (helper_key).
struct RwKeys {
  explicit RwKeys(std::string key);
  std::string key;             // the writer's lease
  std::string readers;         // key + ":readers": zset token -> lease end (server ms)
  std::string writer_waiting;  // key + ":writer-waiting": a waiting writer's id, short PX
  std::string fence;           // key + ":fence": the writers' fence counter
  std::string released;        // key + ":released": writers wait here (writer and last reader)
  std::string readable;        // key + ":readable": readers wait here (writer release, entries)
};

// The writer's attempt: SET PX `ttl_ms` if no writer and no live reader holds it (INCR the
// fence with `fenced` "1"), removing the waiting marker if it is `waiter`'s; refused, with
// `mark` "1" it sets (or refreshes) the marker to `waiter` for `mark_ms` unless another writer's
// is there. `waiter` names the waiting writer across its attempts (each has its own token).
// Replies as read_multi_reply reads one key: {1, fence} or {0, ms until the holder's lease (or
// the last reader's) ends, 1}.
void build_writer_acquire(VarCommand& c, const RwKeys& keys, std::string_view token,
                          std::string_view ttl_ms, std::string_view fenced, std::string_view mark,
                          std::string_view mark_ms, std::string_view waiter);
// The writer's release: compare-and-delete, always announced to waiting writers and readers
// (readers refused by the writer wait for it, even after a rollback). Replies as a Lock's
// release.
void build_writer_release(VarCommand& c, const RwKeys& keys, std::string_view token, PubSub pubsub,
                          ScriptSend send);
// The writer's extend: a Lock's compare-and-pexpire on the key.
void build_writer_extend(VarCommand& c, const RwKeys& keys, std::string_view token,
                         std::string_view ttl_ms);

// A writer's wait ended without the lock: its marker deleted if it is still `waiter`'s, and the
// readers' channel told (readers held back by it try again). Replies 1 (deleted) or 0.
void build_writer_unmark(VarCommand& c, const RwKeys& keys, std::string_view waiter, PubSub pubsub);

// A reader's attempt: an entry for `token` ending `ttl_ms` from the server's now, if no writer
// holds the key and none waits. `chain` "1" (a waiter that may have been woken with others)
// announces the entry on `readable`, so the next waiting reader of each process tries too.
// `from_writer` non-empty: a downgrade: granted only if the key holds that token, which is then
// deleted in the same step (announced on `readable`). Replies as build_writer_acquire (the
// fence: the writers' counter as it stands, 0 without `fenced`).
void build_reader_acquire(VarCommand& c, const RwKeys& keys, std::string_view token,
                          std::string_view ttl_ms, std::string_view fenced, std::string_view chain,
                          std::string_view from_writer, PubSub pubsub);
// A reader's release: its entry removed; the last reader's release is announced on `released`
// (a waiting writer), also for a rollback. Replies as a Lock's release.
void build_reader_release(VarCommand& c, const RwKeys& keys, std::string_view token, PubSub pubsub,
                          ScriptSend send);
// A reader's extend: its entry's end moved to `ttl_ms` from the server's now, if still live.
void build_reader_extend(VarCommand& c, const RwKeys& keys, std::string_view token,
                         std::string_view ttl_ms);

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_PROTOCOL_RWLOCK_HPP
