// The native core's common part: the standard headers every part uses, and its error types.
//
// The native core (amazons/native/) is the project's C++, written as parts that each own one
// thing, each including the parts it uses: common.h, rules.h (the rules on bitboards),
// adjudicate.h (separated positions), kernels.h (the network's arithmetic), network.h (its
// forward pass), search.h (the bot's search), protocol.h (Botzone's protocol: its input, JSON
// included, and the replies), bot.cpp (the Botzone bot) and evaluator.h (the extension's batch
// evaluator). How they are joined, in this one place:
//   * the Botzone export (`python -m amazons.export MODEL --botzone DIR`, amazons/botzone/cpp_export.py)
//     writes the parts of cpp_export.PARTS in that order into one source without their local
//     #include lines, the settings block where the first part includes "settings.h", and the
//     model block (the network's shape and weights) at bot.cpp's //@MODEL@ line;
//   * setup.py compiles evaluator.h, with common.h, rules.h, kernels.h and network.h, into the
//     extension amazons._native; those parts use no settings;
//   * "settings.h" is no file of the project: it holds the numbers the search and the
//     adjudication share with Python, written from their Python definitions by
//     amazons.botzone.cpp_export.settings_header (the export writes the same block inline), so that each
//     part also compiles alone (tests/test_native_input.py compiles every header so).
// A literal a part keeps for the extension (MAX_MOVES, AMAZONS_PER_SIDE, the trunk-kind codes) is
// checked against its Python definition by tests/test_native_input.py.
// Standard library only, C++11.

#ifndef AMZ_COMMON_H
#define AMZ_COMMON_H

#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <stdexcept>
#include <stdint.h>
#include <string>
#include <utility>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#define AMZ_X86 1
#else
#define AMZ_X86 0
#endif

// ================================================================================================
// Errors: every fault is a BotError with one line of text. The bot ends with exit status 2 and
// the line on stderr; the evaluator extension raises an InputError (wrong input from its caller:
// a position, a move) as ValueError and any other BotError as RuntimeError.

struct BotError : public std::runtime_error {
    explicit BotError(const std::string& what) : std::runtime_error(what) {}
};

struct InputError : public BotError {
    explicit InputError(const std::string& what) : BotError(what) {}
};

// The board sizes the evaluator serves (docs/network.md, "Board sizes"): N x N for N in
// MIN_BOARD_SIZE..MAX_BOARD_SIZE, square y * N + x; the Botzone bot plays 8 x 8 only. Scratch
// that any size may use is sized for MAX_SQUARES (tests check these against amazons.boards).
static const int MIN_BOARD_SIZE = 6, MAX_BOARD_SIZE = 10;
static const int MAX_SQUARES = MAX_BOARD_SIZE * MAX_BOARD_SIZE;

static std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static std::string format(const char* fmt, ...) {
    char buffer[1024];
    va_list args;
    va_start(args, fmt);
    vsnprintf(buffer, sizeof(buffer), fmt, args);
    va_end(args);
    return std::string(buffer);
}


#endif  // AMZ_COMMON_H
