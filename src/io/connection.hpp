// src/io/connection.hpp: the I/O layer as the layers above see it (one include): commands
// (io/command.hpp), replies and the codec (io/codec.hpp), a connection and its errors
// (io/wire.hpp), the pool of one node (io/pool.hpp, ClientImpl), and the fan-out executor
// (io/executor.hpp). Below them: the transport that owns the socket (io/transport.hpp), the
// non-blocking connect (io/dial.hpp), and the background finisher (io/finisher.hpp).
//
// The algorithm half (quorum, validity, tokens) is in core/ and never touches a socket.
#ifndef REDLOCK_SRC_CONNECTION_HPP
#define REDLOCK_SRC_CONNECTION_HPP

#include "io/codec.hpp"     // ReplyPtr, is_error, text, to_reply
#include "io/command.hpp"   // CommandView, FixedCommand, Resend
#include "io/executor.hpp"  // execute, NodeBatch, EarlyFinish, SkipPolicy, PerNode
#include "io/pool.hpp"      // ClientImpl
#include "io/wire.hpp"      // Connection, server_error

#endif  // REDLOCK_SRC_CONNECTION_HPP
