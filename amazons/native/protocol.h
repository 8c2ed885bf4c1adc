// Botzone's protocol (https://wiki.botzone.org.cn/index.php?title=Bot): the input of a turn in
// simple interaction (a turn number n, then 2n - 1 move lines) or JSON interaction (one line
// {"requests": [...], "responses": [...]}), read into a Turn, the game's moves in Botzone's frame;
// the later inputs of a kept process (the newest request only); a JSON time_limit read as
// amazons.players.botzone_limits.read_limit reads it (read_limit); the reply in either interaction; and
// the keep-running marker. Its JSON value and parser hold only what Botzone's input holds. Bad
// input is a BotError naming the line, field or column. The program that includes this part
// (bot.cpp) plays the moves and writes the replies.

#ifndef AMZ_PROTOCOL_H
#define AMZ_PROTOCOL_H

#include "common.h"

// ================================================================================================
// Moves in Botzone's frame: square y * 8 + x, Botzone's text "x0 y0 x1 y1 x2 y2"

struct RealMove {
    int src, dst, arrow;  // real squares y * 8 + x
    bool operator==(const RealMove& other) const {
        return src == other.src && dst == other.dst && arrow == other.arrow;
    }
};

static std::string botzone_text(const RealMove& m) {
    return format("%d %d %d %d %d %d", m.src % 8, m.src / 8, m.dst % 8, m.dst / 8, m.arrow % 8, m.arrow / 8);
}

// ================================================================================================
// Reading the input, writing the reply

static const char* KEEP_RUNNING_MARKER = ">>>BOTZONE_REQUEST_KEEP_RUNNING<<<";
static const char* MOVE_KEYS[6] = {"x0", "y0", "x1", "y1", "x2", "y2"};

// A JSON value (only what Botzone's input holds).
struct Json {
    enum Type { NUL, BOOLEAN, NUMBER, STRING, ARRAY, OBJECT } type;
    bool boolean;
    bool integral;     // a number written without fraction or exponent
    double number;
    std::string text;  // a string's value
    std::vector<Json> items;
    std::vector<std::pair<std::string, Json> > fields;
    Json() : type(NUL), boolean(false), integral(false), number(0.0) {}
    const Json* get(const char* key) const {
        for (size_t i = 0; i < fields.size(); ++i)
            if (fields[i].first == key) return &fields[i].second;
        return 0;
    }
};

class JsonParser {
  public:
    explicit JsonParser(const std::string& text) : s(text), i(0), depth(0) {}

    Json parse() {
        Json value = parse_value();
        skip_space();
        if (i != s.size()) fail("unexpected text after the JSON value");
        return value;
    }

  private:
    const std::string& s;
    size_t i;
    int depth;

    void fail(const char* what) const {
        throw BotError(format("bad JSON input: %s at column %lu: '%.60s'", what, (unsigned long)(i + 1), s.c_str()));
    }
    void skip_space() {
        while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n')) ++i;
    }
    bool literal(const char* word) {
        size_t n = std::strlen(word);
        if (s.compare(i, n, word) != 0) return false;
        i += n;
        return true;
    }
    Json parse_value() {
        skip_space();
        if (i >= s.size()) fail("the input ends inside a value");
        if (++depth > 64) fail("nested too deeply");
        Json value;
        char c = s[i];
        if (c == '{') {
            value.type = Json::OBJECT;
            ++i;
            skip_space();
            if (i < s.size() && s[i] == '}') {
                ++i;
            } else {
                for (;;) {
                    skip_space();
                    if (i >= s.size() || s[i] != '"') fail("expected a field name");
                    std::string key = parse_string();
                    skip_space();
                    if (i >= s.size() || s[i] != ':') fail("expected ':'");
                    ++i;
                    value.fields.push_back(std::make_pair(key, parse_value()));
                    skip_space();
                    if (i < s.size() && s[i] == ',') {
                        ++i;
                        continue;
                    }
                    if (i < s.size() && s[i] == '}') {
                        ++i;
                        break;
                    }
                    fail("expected ',' or '}'");
                }
            }
        } else if (c == '[') {
            value.type = Json::ARRAY;
            ++i;
            skip_space();
            if (i < s.size() && s[i] == ']') {
                ++i;
            } else {
                for (;;) {
                    value.items.push_back(parse_value());
                    skip_space();
                    if (i < s.size() && s[i] == ',') {
                        ++i;
                        continue;
                    }
                    if (i < s.size() && s[i] == ']') {
                        ++i;
                        break;
                    }
                    fail("expected ',' or ']'");
                }
            }
        } else if (c == '"') {
            value.type = Json::STRING;
            value.text = parse_string();
        } else if (literal("true")) {
            value.type = Json::BOOLEAN;
            value.boolean = true;
        } else if (literal("false")) {
            value.type = Json::BOOLEAN;
        } else if (literal("null")) {
            value.type = Json::NUL;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            size_t start = i;
            if (s[i] == '-') ++i;
            while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
            value.integral = true;
            if (i < s.size() && s[i] == '.') {
                value.integral = false;
                ++i;
                while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
            }
            if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
                value.integral = false;
                ++i;
                if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
                while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
            }
            std::string number = s.substr(start, i - start);
            char* end = 0;
            value.type = Json::NUMBER;
            value.number = std::strtod(number.c_str(), &end);
            if (number == "-" || !end || *end != '\0') fail("bad number");
        } else {
            fail("unexpected character");
        }
        --depth;
        return value;
    }
    // The four hex digits of a JSON unicode escape, from s[at].
    unsigned hex4(size_t at) const {
        if (at + 4 > s.size()) fail("bad \\u escape");
        unsigned code = 0;
        for (size_t k = at; k < at + 4; ++k) {
            char c = s[k];
            int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                      : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
            if (digit < 0) fail("bad \\u escape");
            code = code << 4 | (unsigned)digit;
        }
        return code;
    }
    static void append_utf8(unsigned code, std::string* out) {
        if (code < 0x80) {
            *out += (char)code;
        } else if (code < 0x800) {
            *out += (char)(0xC0 | code >> 6);
            *out += (char)(0x80 | (code & 0x3F));
        } else if (code < 0x10000) {
            *out += (char)(0xE0 | code >> 12);
            *out += (char)(0x80 | (code >> 6 & 0x3F));
            *out += (char)(0x80 | (code & 0x3F));
        } else {
            *out += (char)(0xF0 | code >> 18);
            *out += (char)(0x80 | (code >> 12 & 0x3F));
            *out += (char)(0x80 | (code >> 6 & 0x3F));
            *out += (char)(0x80 | (code & 0x3F));
        }
    }
    std::string parse_string() {
        std::string out;
        ++i;  // the opening quote
        while (i < s.size() && s[i] != '"') {
            if (s[i] == '\\') {
                ++i;
                if (i >= s.size()) break;
                char e = s[i];
                if (e == 'u') {
                    unsigned code = hex4(i + 1);
                    i += 4;
                    // a surrogate pair is one character (as Python's json reads it)
                    if (code >= 0xD800 && code < 0xDC00 && i + 6 < s.size() && s[i + 1] == '\\' &&
                        s[i + 2] == 'u') {
                        unsigned low = hex4(i + 3);
                        if (low >= 0xDC00 && low < 0xE000) {
                            code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
                            i += 6;
                        }
                    }
                    append_utf8(code, &out);
                } else {
                    out += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e == 'b' ? '\b' : e == 'f' ? '\f' : e;
                }
                ++i;
            } else {
                out += s[i++];
            }
        }
        if (i >= s.size()) fail("unterminated string");
        ++i;
        return out;
    }
};

// Six integers "x0 y0 x1 y1 x2 y2" -> the move; `no_move` set for Black's first request (all -1).
static RealMove parse_move_numbers(const long* v, const std::string& where, bool allow_no_move, bool* no_move) {
    *no_move = false;
    bool all_minus_one = true;
    for (int k = 0; k < 6; ++k) all_minus_one = all_minus_one && v[k] == -1;
    if (all_minus_one) {
        if (!allow_no_move) throw BotError(where + ": '-1 -1 -1 -1 -1 -1' is only valid as Black's first request");
        *no_move = true;
        RealMove none = {-1, -1, -1};
        return none;
    }
    for (int k = 0; k < 6; ++k)
        if (v[k] < 0 || v[k] > 7)
            throw BotError(format("%s: %s = %ld is off the board (coordinates are 0..7)", where.c_str(), MOVE_KEYS[k], v[k]));
    RealMove m = {(int)(v[1] * 8 + v[0]), (int)(v[3] * 8 + v[2]), (int)(v[5] * 8 + v[4])};
    return m;
}

static std::string trim(const std::string& text) {
    size_t start = text.find_first_not_of(" \t\r\n");
    if (start == std::string::npos) return "";
    size_t end = text.find_last_not_of(" \t\r\n");
    return text.substr(start, end - start + 1);
}

static std::vector<std::string> split_tokens(const std::string& text) {
    std::vector<std::string> tokens;
    size_t i = 0;
    while (i < text.size()) {
        while (i < text.size() && (text[i] == ' ' || text[i] == '\t' || text[i] == '\r' || text[i] == '\n')) ++i;
        size_t start = i;
        while (i < text.size() && !(text[i] == ' ' || text[i] == '\t' || text[i] == '\r' || text[i] == '\n')) ++i;
        if (i > start) tokens.push_back(text.substr(start, i - start));
    }
    return tokens;
}

static bool parse_long(const std::string& token, long* out) {
    if (token.empty() || token.size() > 18) return false;
    char* end = 0;
    *out = std::strtol(token.c_str(), &end, 10);
    return end && *end == '\0';
}

static RealMove parse_move_line(const std::string& line, const std::string& where, bool allow_no_move, bool* no_move) {
    std::vector<std::string> tokens = split_tokens(line);
    if (tokens.size() != 6)
        throw BotError(format("%s: '%s' is not a move: expected six integers x0 y0 x1 y1 x2 y2", where.c_str(),
                              trim(line).c_str()));
    long v[6];
    for (int k = 0; k < 6; ++k)
        if (!parse_long(tokens[k], &v[k]))
            throw BotError(format("%s: '%s' is not an integer (in '%s')", where.c_str(), tokens[k].c_str(), trim(line).c_str()));
    return parse_move_numbers(v, where, allow_no_move, no_move);
}

static RealMove move_from_json(const Json& value, const std::string& where, bool allow_no_move, bool* no_move) {
    if (value.type != Json::OBJECT) throw BotError(where + ": expected a move object {\"x0\": .., ..., \"y2\": ..}");
    long v[6];
    for (int k = 0; k < 6; ++k) {
        const Json* field = value.get(MOVE_KEYS[k]);
        if (!field) throw BotError(format("%s: the move object lacks %s", where.c_str(), MOVE_KEYS[k]));
        if (field->type != Json::NUMBER || !field->integral || std::fabs(field->number) > 1e9)
            throw BotError(format("%s: %s is not an integer", where.c_str(), MOVE_KEYS[k]));
        v[k] = (long)field->number;
    }
    return parse_move_numbers(v, where, allow_no_move, no_move);
}

// A JSON limit field (time_limit, memory_limit) as amazons.players.botzone_limits.read_limit reads it: a
// finite positive number, or a string holding one (limit_number_text, blanks around it ignored);
// 0 (no limit: the bot's own allowance applies) for every other value, the empty forms Botzone's
// wiki shows ("", null, a missing field) included. A limit can only lower the allowance.
static bool limit_number_text(const std::string& text) {
    // botzone_limits._NUMBER_TEXT: [+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?
    size_t i = 0, n = text.size(), digits = 0;
    if (i < n && (text[i] == '+' || text[i] == '-')) ++i;
    for (; i < n && text[i] >= '0' && text[i] <= '9'; ++i) ++digits;
    if (i < n && text[i] == '.')
        for (++i; i < n && text[i] >= '0' && text[i] <= '9'; ++i) ++digits;
    if (digits == 0) return false;
    if (i < n && (text[i] == 'e' || text[i] == 'E')) {
        ++i;
        if (i < n && (text[i] == '+' || text[i] == '-')) ++i;
        size_t exponent = 0;
        for (; i < n && text[i] >= '0' && text[i] <= '9'; ++i) ++exponent;
        if (exponent == 0) return false;
    }
    return i == n;
}

static double read_limit(const Json* field) {
    if (!field) return 0.0;
    double value;
    if (field->type == Json::NUMBER) {
        value = field->number;
    } else if (field->type == Json::STRING) {
        std::string text = trim(field->text);
        if (!limit_number_text(text)) return 0.0;
        value = std::strtod(text.c_str(), 0);
    } else {
        return 0.0;
    }
    return value > 0 && value < HUGE_VAL ? value : 0.0;  // NaN fails value > 0
}

// botzone_limits.is_empty_limit: null, "" or a missing field, read as no limit without a note.
static bool is_empty_limit(const Json* field) {
    return !field || field->type == Json::NUL ||
           (field->type == Json::STRING && field->text.empty());
}

static std::string json_text(const Json& value) {
    switch (value.type) {
        case Json::NUL: return "null";
        case Json::BOOLEAN: return value.boolean ? "true" : "false";
        case Json::NUMBER: return format("%g", value.number);
        case Json::STRING: return "\"" + value.text + "\"";
        case Json::ARRAY: return "a list";
        default: return "an object";
    }
}

static bool g_limit_noted = false;  // the note on an ignored time_limit is written once per process

struct Turn {
    std::vector<RealMove> history;  // every move so far, the newest request last
    bool complete;                  // the whole game (else only the newest request, keep-running)
    bool json;                      // answer in JSON
    double time_limit;              // a JSON input's time_limit in seconds, 0 for none (read_limit)
};

static Turn parse_json_input(const std::string& line) {
    Json value = JsonParser(line).parse();
    if (value.type != Json::OBJECT) throw BotError("JSON input must be an object");
    Turn turn;
    turn.json = true;
    turn.time_limit = 0.0;
    const Json* requests = value.get("requests");
    if (!requests) {
        bool has_move = true;
        for (int k = 0; k < 6; ++k) has_move = has_move && value.get(MOVE_KEYS[k]) != 0;
        if (!has_move) throw BotError("JSON input has neither a 'requests' list nor the fields of a move");
        bool no_move;
        turn.history.push_back(move_from_json(value, "move object", false, &no_move));
        turn.complete = false;
        return turn;
    }
    turn.complete = true;
    if (requests->type != Json::ARRAY || requests->items.empty()) throw BotError("'requests' must be a non-empty list");
    const Json* responses = value.get("responses");
    Json empty;
    empty.type = Json::ARRAY;
    if (!responses) responses = &empty;
    if (responses->type != Json::ARRAY) throw BotError("'responses' must be a list");
    if (requests->items.size() != responses->items.size() + 1)
        throw BotError(format("%lu requests and %lu responses: expected one request more",
                              (unsigned long)requests->items.size(), (unsigned long)responses->items.size()));
    for (size_t k = 0; k < requests->items.size(); ++k) {
        bool no_move;
        RealMove m = move_from_json(requests->items[k], format("requests[%lu]", (unsigned long)k), k == 0, &no_move);
        if (!no_move) turn.history.push_back(m);
        if (k < responses->items.size())
            turn.history.push_back(
                move_from_json(responses->items[k], format("responses[%lu]", (unsigned long)k), false, &no_move));
    }
    const Json* limit = value.get("time_limit");
    turn.time_limit = read_limit(limit);
    if (turn.time_limit == 0.0 && !is_empty_limit(limit) && !g_limit_noted) {
        g_limit_noted = true;
        std::fprintf(stderr, "bot: note: time_limit %s is not a positive number of seconds: "
                     "the bot's own time applies\n", json_text(*limit).c_str());
        std::fflush(stderr);
    }
    return turn;
}

// One line from stdin without its newline; false at the end of input.
static bool read_line(std::string* line) {
    line->clear();
    char buffer[4096];
    bool any = false;
    while (std::fgets(buffer, sizeof(buffer), stdin)) {
        any = true;
        *line += buffer;
        if (!line->empty() && (*line)[line->size() - 1] == '\n') break;
    }
    if (!any) return false;
    while (!line->empty() && ((*line)[line->size() - 1] == '\n' || (*line)[line->size() - 1] == '\r'))
        line->erase(line->size() - 1);
    return true;
}

static bool is_lone_integer(const std::string& line) {
    std::vector<std::string> tokens = split_tokens(line);
    long value;
    return tokens.size() == 1 && parse_long(tokens[0], &value);
}

// The process's first input: a simple transcript or one JSON line.
static Turn read_first_input() {
    std::string line;
    do {
        if (!read_line(&line)) throw BotError("input ended before the turn number (or JSON object)");
    } while (trim(line).empty());
    std::string first = trim(line);
    if (first[0] == '{') return parse_json_input(first);
    long turn_number;
    if (!parse_long(first, &turn_number))
        throw BotError(format("line 1: '%s' is not a turn number (a positive integer)", first.c_str()));
    if (turn_number < 1 || turn_number > 100)
        throw BotError(format("line 1: turn number %ld must be between 1 and 100", turn_number));
    Turn turn;
    turn.json = false;
    turn.complete = true;
    turn.time_limit = 0.0;
    long expected = 2 * turn_number - 1;
    for (long k = 0; k < expected; ++k) {
        if (!read_line(&line))
            throw BotError(format("input ended after %ld of the %ld move lines that turn %ld needs", k, expected,
                                  turn_number));
        bool no_move;
        RealMove m = parse_move_line(line, format("line %ld", k + 2), k == 0, &no_move);
        if (!no_move) turn.history.push_back(m);
    }
    return turn;
}

// A later keep-running input: the newest request (a move line, tolerating blank and lone
// turn-number lines before it, or a JSON line). False at the end of input before any text.
static bool read_update(Turn* turn) {
    std::string line;
    for (;;) {
        if (!read_line(&line)) return false;
        std::string text = trim(line);
        if (text.empty() || is_lone_integer(text)) continue;
        if (text[0] == '{') {
            *turn = parse_json_input(text);
            return true;
        }
        turn->json = false;
        turn->complete = false;
        turn->time_limit = 0.0;
        turn->history.clear();
        bool no_move;
        turn->history.push_back(parse_move_line(text, "the request", false, &no_move));
        return true;
    }
}

static std::string json_reply(const RealMove* move, const std::string& debug) {
    int v[6] = {-1, -1, -1, -1, -1, -1};
    if (move) {
        v[0] = move->src % 8;
        v[1] = move->src / 8;
        v[2] = move->dst % 8;
        v[3] = move->dst / 8;
        v[4] = move->arrow % 8;
        v[5] = move->arrow / 8;
    }
    std::string text = "{\"response\": {";
    for (int k = 0; k < 6; ++k) text += format("%s\"%s\": %d", k ? ", " : "", MOVE_KEYS[k], v[k]);
    text += "}, \"debug\": \"";
    for (size_t i = 0; i < debug.size(); ++i) {
        if (debug[i] == '"' || debug[i] == '\\') text += '\\';
        text += debug[i];
    }
    return text + "\"}";
}

#endif  // AMZ_PROTOCOL_H
