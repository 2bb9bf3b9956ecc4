// redlock/redlock.hpp: the one include for all of redlock.
//
//   #include <redlock/redlock.hpp>
//
//   redlock::Client client(redlock::Endpoint::parse("redis://127.0.0.1:6379"));
//   redlock::Lock lock(client, "jobs:nightly");
//   std::lock_guard<redlock::Lock> guard(lock);
#ifndef REDLOCK_REDLOCK_HPP
#define REDLOCK_REDLOCK_HPP

#include <redlock/client.hpp>     // Client, Script
#include <redlock/election.hpp>   // Election, Leader, StopToken
#include <redlock/endpoint.hpp>   // Endpoint
#include <redlock/errors.hpp>     // Error and its subclasses
#include <redlock/hold.hpp>       // Hold
#include <redlock/lease.hpp>      // LeaseToken
#include <redlock/lock.hpp>       // Lock, Redlock
#include <redlock/log.hpp>        // set_log_handler
#include <redlock/multilock.hpp>  // MultiLock
#include <redlock/observer.hpp>   // Observer, set_observer
#include <redlock/options.hpp>    // LockOptions, LostReason, LostEvent
#include <redlock/reply.hpp>      // Reply
#include <redlock/rwlock.hpp>     // ReadWriteLock
#include <redlock/semaphore.hpp>  // Semaphore
#include <redlock/version.hpp>    // REDLOCK_VERSION_*
#include <redlock/watchdog.hpp>   // Watchdog

#endif  // REDLOCK_REDLOCK_HPP
