// RequestParser on raw bytes: the framing rules that keep a request from hiding in a body.
#include <string>
#include <string_view>

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <gtest/gtest.h>

#include "server/http_request_parser.h"

namespace peregrine::server {
namespace {

namespace http = boost::beast::http;

struct Parsed {
  boost::beast::error_code ec;
  FramingError framing = FramingError::kNone;
  std::string body;
  size_t num_consumed = 0;
  bool is_done = false;
};

// Feeds `bytes` (header and body) in one piece, as far as the parser goes.
Parsed Parse(std::string_view bytes) {
  RequestParser parser{ServerLimits{}};
  Parsed out;
  while (out.num_consumed < bytes.size() && !parser.is_done()) {
    const size_t n = parser.put(
        boost::asio::buffer(bytes.data() + out.num_consumed, bytes.size() - out.num_consumed),
        out.ec);
    out.num_consumed += n;
    if (out.ec == http::error::need_more) {
      out.ec = {};
      break;
    }
    if (out.ec || n == 0) break;
  }
  out.framing = parser.framing_error();
  out.body = parser.request().body;
  out.is_done = parser.is_done();
  return out;
}

std::string Request(std::string_view fields, std::string_view body, std::string_view version = "1.1") {
  return "POST /v1/completions HTTP/" + std::string(version) + "\r\nHost: x\r\n" + std::string(fields) +
         "\r\n" + std::string(body);
}

// A chunked body carrying a whole second request: it must never be seen as a request.
const std::string kSmuggled =
    "0\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n";

TEST(RequestParserTest, PlainChunkedBodyIsRead) {
  const Parsed p = Parse(Request("Transfer-Encoding: chunked\r\n", "3\r\nabc\r\n0\r\n\r\n"));
  EXPECT_FALSE(p.ec) << p.ec.message();
  EXPECT_TRUE(p.is_done);
  EXPECT_EQ(p.body, "abc");
  EXPECT_EQ(Parse(Request("Transfer-Encoding:  ChUnKeD \r\n", "0\r\n\r\n")).framing,
            FramingError::kNone);
}

TEST(RequestParserTest, CodingsBesidesChunkedAre501) {
  for (const char* te : {"gzip, chunked", "deflate,chunked", "gzip , CHUNKED"}) {
    const Parsed p = Parse(Request(std::string("Transfer-Encoding: ") + te + "\r\n", kSmuggled));
    EXPECT_EQ(p.ec, http::error::bad_transfer_encoding) << te;
    EXPECT_EQ(p.framing, FramingError::kUnsupportedCoding) << te;
    EXPECT_TRUE(p.body.empty()) << te;
  }
}

TEST(RequestParserTest, AmbiguousFramingIs400) {
  const std::string cases[] = {
      "Transfer-Encoding: identity\r\n",
      "Transfer-Encoding: chunked, chunked\r\n",
      "Transfer-Encoding: chunked, gzip\r\n",
      "Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked, chunked\r\n",
      "Transfer-Encoding: ,\r\n",
      "Transfer-Encoding: identity\r\nContent-Length: 5\r\n",
      "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
      "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n",
      "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
  };
  for (const std::string& fields : cases) {
    const Parsed p = Parse(Request(fields, kSmuggled));
    EXPECT_TRUE(p.ec == http::error::bad_transfer_encoding || p.ec == http::error::bad_content_length)
        << fields << ": " << p.ec.message();
    EXPECT_NE(p.framing, FramingError::kUnsupportedCoding) << fields;
    EXPECT_TRUE(p.body.empty()) << fields;
  }
  // Transfer-Encoding means nothing in HTTP/1.0 (RFC 9112 6.1): the framing is faulty.
  const Parsed old = Parse(Request("Transfer-Encoding: chunked\r\n", kSmuggled, "1.0"));
  EXPECT_EQ(old.ec, http::error::bad_transfer_encoding);
  EXPECT_EQ(old.framing, FramingError::kInvalid);
}

TEST(RequestParserTest, ContentLengthAloneStillFrames) {
  const Parsed p = Parse(Request("Content-Length: 3\r\n", "abcGET"));
  EXPECT_FALSE(p.ec);
  EXPECT_TRUE(p.is_done);
  EXPECT_EQ(p.body, "abc");
}

}  // namespace
}  // namespace peregrine::server
