#include "cli/tokenize_command.h"

#include <charconv>
#include <functional>
#include <iostream>
#include <iterator>
#include <memory>
#include <vector>

#include "tokenizer/stream_decoder.h"

namespace peregrine::cli {
namespace {

struct CommandFlags {
  std::string tokenizer_path;
  std::vector<std::string> args;
  TokenizeFlags tokenize;
  bool skip_special_tokens = false;
  bool stream = false;
};

std::string ReadStdin() {
  return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}

// Joins the positional arguments with spaces, or reads stdin when there are none.
std::string Input(const std::vector<std::string>& args) {
  if (args.empty()) return ReadStdin();
  std::string out;
  for (const std::string& a : args) {
    if (!out.empty()) out += ' ';
    out += a;
  }
  return out;
}

// Runs `work` and turns a failed Status into CLI11's error, which main() reports.
void RunOrThrow(const std::function<Status()>& work) {
  const Status status = work();
  if (!status.ok()) {
    std::cerr << "error: " << status.ToString() << "\n";
    throw CLI::RuntimeError(1);
  }
}

Result<std::unique_ptr<tokenizer::Tokenizer>> Load(const std::string& path) {
  PG_ASSIGN_OR_RETURN(tokenizer::Tokenizer t, tokenizer::Tokenizer::FromFile(path));
  return std::make_unique<tokenizer::Tokenizer>(std::move(t));
}

}  // namespace

Result<std::string> TokenizeToString(const tokenizer::Tokenizer& tokenizer, std::string_view text,
                                     const TokenizeFlags& flags) {
  PG_ASSIGN_OR_RETURN(const std::vector<int32_t> ids,
                      tokenizer.Encode(text, flags.parse_special, flags.add_special_tokens));
  std::string out;
  if (flags.show_tokens) {
    for (const int32_t id : ids) {
      out += std::to_string(id);
      out += '\t';
      out += tokenizer.IdToToken(id).value_or("");
      out += '\n';
    }
    return out;
  }
  out += flags.json ? "[" : "";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out += flags.json ? ", " : " ";
    out += std::to_string(ids[i]);
  }
  out += flags.json ? "]\n" : "\n";
  return out;
}

Result<std::string> DetokenizeString(const tokenizer::Tokenizer& tokenizer, std::string_view ids,
                                     bool skip_special_tokens) {
  std::vector<int32_t> parsed;
  size_t pos = 0;
  while (pos < ids.size()) {
    const char c = ids[pos];
    if (c == ' ' || c == ',' || c == '\n' || c == '\r' || c == '\t' || c == '[' || c == ']') {
      ++pos;
      continue;
    }
    int64_t value = 0;
    const auto [end, ec] = std::from_chars(ids.data() + pos, ids.data() + ids.size(), value);
    const size_t used = static_cast<size_t>(end - (ids.data() + pos));
    if (ec != std::errc() || used == 0 || value < 0 || value >= tokenizer.id_limit()) {
      const size_t stop = ids.find_first_of(" ,\n\r\t[]", pos);
      return InvalidArgument("not a token id: '" + std::string(ids.substr(pos, stop - pos)) +
                             "' (ids are 0.." + std::to_string(tokenizer.id_limit() - 1) + ")");
    }
    parsed.push_back(static_cast<int32_t>(value));
    pos += used;
  }
  return tokenizer.Decode(parsed, skip_special_tokens);
}

void AddTokenizerCommands(CLI::App& app) {
  auto flags = std::make_shared<CommandFlags>();

  CLI::App* tok = app.add_subcommand("tokenize", "Print the token ids of text (args or stdin)");
  tok->add_option("--tokenizer", flags->tokenizer_path, "tokenizer.json or a model directory")
      ->required();
  tok->add_option("text", flags->args, "text to encode (default: read stdin)");
  tok->add_flag_callback("--no-parse-special", [flags] { flags->tokenize.parse_special = false; },
                         "encode special-token text as plain text");
  tok->add_flag("--add-special-tokens", flags->tokenize.add_special_tokens,
                "apply the tokenizer's post-processor template (e.g. BOS)");
  tok->add_flag("--json", flags->tokenize.json, "print a JSON array");
  tok->add_flag("--tokens", flags->tokenize.show_tokens, "print one 'id<TAB>token' per line");
  tok->callback([flags] {
    RunOrThrow([&]() -> Status {
      PG_ASSIGN_OR_RETURN(auto t, Load(flags->tokenizer_path));
      PG_ASSIGN_OR_RETURN(const std::string out,
                          TokenizeToString(*t, Input(flags->args), flags->tokenize));
      std::cout << out << std::flush;
      return Status::Ok();
    });
  });

  CLI::App* detok = app.add_subcommand("detokenize", "Print the text of token ids (args or stdin)");
  detok->add_option("--tokenizer", flags->tokenizer_path, "tokenizer.json or a model directory")
      ->required();
  detok->add_option("ids", flags->args, "ids, separated by spaces or commas (default: stdin)");
  detok->add_flag("--skip-special-tokens", flags->skip_special_tokens,
                  "drop tokens flagged special (BOS, EOS, ...)");
  detok->add_flag("--stream", flags->stream,
                  "decode id by id as a server streams, writing each piece as it completes");
  detok->callback([flags] {
    RunOrThrow([&]() -> Status {
      PG_ASSIGN_OR_RETURN(auto t, Load(flags->tokenizer_path));
      const std::string input = Input(flags->args);
      if (!flags->stream) {
        PG_ASSIGN_OR_RETURN(const std::string text,
                            DetokenizeString(*t, input, flags->skip_special_tokens));
        std::cout << text << std::flush;
        return Status::Ok();
      }
      // Validate everything first so a bad id is reported before any output.
      PG_RETURN_IF_ERROR(DetokenizeString(*t, input, false).status());
      tokenizer::StreamDecoder decoder(*t, flags->skip_special_tokens);
      size_t pos = 0;
      while (pos < input.size()) {
        const size_t begin = input.find_first_of("0123456789", pos);
        if (begin == std::string::npos) break;
        size_t end = input.find_first_not_of("0123456789", begin);
        if (end == std::string::npos) end = input.size();
        std::cout << decoder.Push(std::stoi(input.substr(begin, end - begin))) << std::flush;
        pos = end;
      }
      std::cout << decoder.Flush() << std::flush;
      return Status::Ok();
    });
  });
}

}  // namespace peregrine::cli
