// The native core's common part: the standard headers every part uses, and its error type.
//
// The native core (amazons/native/) is the project's C++: the rules on bitboards (rules.h), the
// network's arithmetic (kernels.h), its forward pass (network.h), the search (search.h) and the
// Botzone bot around them (bot.cpp). `python -m amazons.export MODEL --botzone DIR` joins the
// parts, in that order, into one self-contained source (amazons/botzone_cpp.py); setup.py
// compiles common.h, rules.h, kernels.h and network.h into the CPU evaluator amazons._native.
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
// the line on stderr; the evaluator extension raises it as a Python exception.

struct BotError : public std::runtime_error {
    explicit BotError(const std::string& what) : std::runtime_error(what) {}
};

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
