// A sealed store connection's records (docs/security.md, "The sealed
// wire"; collie/seal.hpp): below the frames, both ways. After a handshake
// that keyed it, every byte the client and the server send each other
// (requests, replies, a torch tunnel's bytes) travels in records; this
// class turns plaintext into records for writing, and records read from
// the socket back into plaintext, opened and checked before any of it is
// handed on.
//
// Reading: read_some() gives plaintext already opened, else reads what the
// socket has (never blocking) and opens every whole record; a record that
// fails its tag, or a length no sender uses, or a connection that ends in
// the middle of one, is reported as an error (std::errc::bad_message) with
// failure() saying what was wrong, and the channel is then beyond repair.
// Writing: seal_next() seals the next bytes of a gathered write, up to
// kBatchBytes, into a buffer the caller writes whole before the next call
// (async_write_sealed does both for Asio's callers).
//
// Memory: only while bytes are under way. Reading holds the record it is
// in (up to kMaxRecordBytes) and what the socket had after it (up to
// kReadAhead), opened in place; writing holds the records of one batch
// until written() (up to kBatchBytes). Between requests a channel holds
// nothing; held() says what it holds, for the store's memory budget.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include <asio/buffer.hpp>
#include <asio/error.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/write.hpp>

#include <collie/seal.hpp>

namespace collie::store {

class SealedChannel {
 public:
  // The plaintext one write seals at most: four records.
  static constexpr std::size_t kBatchBytes = 4 * seal::kMaxRecordBytes;
  // The bytes a read asks the socket for beyond the record it is in (the
  // next records of a stream, in the same call).
  static constexpr std::size_t kReadAhead = 16 * 1024;

  SealedChannel(const seal::Key& send, const seal::Key& receive);

  // Bytes wait here: plaintext opened and not yet taken, or a whole record
  // read and not yet opened (or one whose length says it is broken).
  // read_some() then answers without the socket: a caller that waited for
  // the socket first would wait for bytes it already has.
  bool has_unread() const;
  // Up to out.size() bytes of plaintext (at least 1), or 0 with `ec`:
  // would_block (nothing whole to open yet), eof (closed between records),
  // bad_message (see failure()), or the socket's error.
  std::size_t read_some(int fd, std::span<std::uint8_t> out, std::error_code& ec);
  // Bytes of a record read and not yet opened: a record under way.
  bool holds_part() const { return in_end_ > in_begin_; }
  // What was wrong, after bad_message.
  const std::string& failure() const { return failure_; }

  // Seals the bytes of `buffers` from plaintext offset `offset`, up to
  // kBatchBytes of them: `plain` is how many; the records are returned,
  // valid until the next call or written().
  std::span<const std::uint8_t> seal_next(std::span<const asio::const_buffer> buffers,
                                          std::size_t offset, std::size_t& plain);
  // The records of the last seal_next() are written: their memory goes.
  void written();

  // The bytes of memory the channel's buffers hold now.
  std::size_t held() const { return in_size_ + out_size_; }

 private:
  // Opens the record at in_begin_ in place if it is whole: true if it did
  // (its plaintext is then [plain_begin_, plain_end_)); false if it is not
  // whole yet, or failed (ec set).
  bool open_next(std::error_code& ec);
  // Room in in_ for the rest of the record under way and kReadAhead more.
  void make_room();

  seal::Sealer sealer_;
  seal::Opener opener_;
  // Read from the socket: plaintext opened in place and not yet taken
  // [plain_begin_, plain_end_), then records not yet opened [in_begin_,
  // in_end_); allocated while either holds bytes.
  std::unique_ptr<std::uint8_t[]> in_;
  std::size_t in_size_ = 0;
  std::size_t plain_begin_ = 0;
  std::size_t plain_end_ = 0;
  std::size_t in_begin_ = 0;
  std::size_t in_end_ = 0;
  std::unique_ptr<std::uint8_t[]> out_;  // sealed records being written
  std::size_t out_size_ = 0;
  std::string failure_;
};

// asio::async_write of `buffers` through `channel`: sealed a batch at a
// time, each written whole before the next is sealed; then
// handler(error_code, plaintext bytes written). The channel must live until
// then (the caller's handler keeps its owner), and `buffers`' memory while
// alive() says the write is still wanted: its owner may close the
// connection and free the frames under way (a store that refused a
// request, a client that failed), and a batch that was written just before
// then must not go on to seal the next from freed memory (it ends with
// operation_aborted instead).
template <class Handler, class Alive>
void async_write_sealed(asio::ip::tcp::socket& socket, SealedChannel& channel,
                        std::vector<asio::const_buffer> buffers, Handler handler, Alive alive) {
  struct Write {
    asio::ip::tcp::socket& socket;
    SealedChannel& channel;
    std::vector<asio::const_buffer> buffers;
    Handler handler;
    Alive alive;
    std::size_t total = 0;
    std::size_t done = 0;

    static void next(std::shared_ptr<Write> w) {
      if (w->done == w->total) {
        w->channel.written();
        return w->handler(std::error_code(), w->done);
      }
      if (!w->alive()) {
        w->channel.written();
        return w->handler(asio::error::operation_aborted, w->done);
      }
      std::size_t plain = 0;
      const auto sealed = w->channel.seal_next(w->buffers, w->done, plain);
      auto& socket = w->socket;
      asio::async_write(socket, asio::buffer(sealed.data(), sealed.size()),
                        [w = std::move(w), plain](std::error_code ec, std::size_t) mutable {
                          if (ec) {
                            w->channel.written();
                            return w->handler(ec, w->done);
                          }
                          w->done += plain;
                          next(std::move(w));
                        });
    }
  };
  auto w = std::make_shared<Write>(
      Write{socket, channel, std::move(buffers), std::move(handler), std::move(alive), 0, 0});
  w->total = asio::buffer_size(w->buffers);
  Write::next(std::move(w));
}

}  // namespace collie::store
