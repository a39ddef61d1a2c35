// args.h: long command-line options from one table, so --help always matches the parser.
// defines: Option, OptionType, parse_options(), parse_options_given(), option_given(), print_usage(), parse_bool_word(),
//          option_number_ok()
// Each option has a long name (--batch-size), an optional one-letter alias (-b), a type, a pointer to
// the value it sets, and a help line. Values come as "--name value" or "--name=value". Unknown
// options, missing values (also one whose next argument is an option: "-o --eval-only") and malformed numbers
// stop the program with one clear message; a value that starts with -- is given as --name=value.
// Numbers are decimal, as a person types them (option_number_ok): an integer is [+-]digits and fits an int; a
// float is [+-]digits[.digits][e[+-]digits] (or .digits) and a finite float, 0 or at least FLT_MIN in
// magnitude. strtoll and strtof alone would also take leading spaces, hexadecimal ("0x10", "0x1p-3"), "inf"
// and "nan", so the text is checked first.
// parse_options_given also records which options the command line gave (given[k] for opts[k]), for a default that
// depends on another option (--recipe fullstack's --attention-fp4): an option left out takes it, one given keeps its
// value, whatever that value is.
#pragma once
#include <errno.h>
#include <limits.h>
#include <math.h>
#include "llmc/base/common.h"

// OPT_FLAG: a switch that takes no value (--eval-only turns it on; --eval-only=off also parses).
typedef enum { OPT_INT, OPT_FLOAT, OPT_STRING, OPT_BOOL, OPT_CHOICE, OPT_FLAG } OptionType;

typedef struct {
    const char* name;     // long name, without the leading dashes
    char alias;           // one-letter alias, or 0
    OptionType type;
    void* value;          // int*, float*, const char**, int* (bool, flag: 0/1), const char** (choice)
    const char* choices;  // OPT_CHOICE: allowed words separated by '|'
    const char* help;
} Option;

// "on/off", "1/0", "true/false", "yes/no" -> 1/0; -1 when it is none of them.
static inline int parse_bool_word(const char* s) {
    const char* yes[] = {"on", "1", "true", "yes"};
    const char* no[] = {"off", "0", "false", "no"};
    for (int i = 0; i < 4; i++) {
        if (strcmp(s, yes[i]) == 0) return 1;
        if (strcmp(s, no[i]) == 0) return 0;
    }
    return -1;
}

static inline int choice_allowed(const char* choices, const char* word) {
    size_t n = strlen(word);
    const char* p = choices;
    while (*p) {
        const char* bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && strncmp(p, word, n) == 0) return 1;
        if (!bar) break;
        p = bar + 1;
    }
    return 0;
}

// Whether text is a decimal number: [+-]digits, and with fraction also [+-]digits[.digits][(e|E)[+-]digits] or
// [+-].digits[...]. Nothing before or after it (no spaces), no hexadecimal, no inf or nan.
static inline int option_number_ok(const char* text, int fraction) {
    const char* p = text;
    int digits = 0;
    if (*p == '+' || *p == '-') p++;
    for (; *p >= '0' && *p <= '9'; p++) digits++;
    if (fraction && *p == '.')
        for (p++; *p >= '0' && *p <= '9'; p++) digits++;
    if (!digits) return 0;
    if (fraction && (*p == 'e' || *p == 'E')) {
        p++;
        if (*p == '+' || *p == '-') p++;
        if (!(*p >= '0' && *p <= '9')) return 0;
        while (*p >= '0' && *p <= '9') p++;
    }
    return *p == '\0';
}

static inline void option_set(const Option* o, const char* text) {
    switch (o->type) {
    case OPT_INT: {
        fail_if(!option_number_ok(text, 0), "--%s expects an integer, got '%s'", o->name, text);
        errno = 0;
        long long v = strtoll(text, NULL, 10);
        fail_if(errno || v < INT_MIN || v > INT_MAX, "--%s: %s is outside the range of an int (%d to %d)", o->name, text,
                INT_MIN, INT_MAX);
        *(int*)o->value = (int)v;
        break;
    }
    case OPT_FLOAT: {
        fail_if(!option_number_ok(text, 1), "--%s expects a number, got '%s' (a decimal number such as 3e-4)", o->name,
                text);
        errno = 0;
        float v = strtof(text, NULL);
        fail_if(errno || !isfinite(v), "--%s: %s is outside the range of a float (about 1.2e-38 to 3.4e38 in magnitude, "
                "or 0)", o->name, text);
        *(float*)o->value = v;
        break;
    }
    case OPT_STRING:
        *(const char**)o->value = text;
        break;
    case OPT_BOOL:
    case OPT_FLAG: {
        int b = parse_bool_word(text);
        fail_if(b < 0, "--%s expects on or off, got '%s'", o->name, text);
        *(int*)o->value = b;
        break;
    }
    case OPT_CHOICE:
        fail_if(!choice_allowed(o->choices, text), "--%s expects one of %s, got '%s'", o->name, o->choices, text);
        *(const char**)o->value = text;
        break;
    }
}

static inline void print_usage(const char* prog, const Option* opts, int n) {
    printf("usage: %s [options]\n\noptions (--name value or --name=value; a value that starts with -- as --name=value; "
           "a switch takes none (or =on, =off); given twice, the last one counts):\n", prog);
    for (int i = 0; i < n; i++) {
        const Option* o = &opts[i];
        char left[64], def[96];
        if (o->alias) snprintf(left, sizeof(left), "-%c, --%s", o->alias, o->name);
        else snprintf(left, sizeof(left), "    --%s", o->name);
        switch (o->type) {
        case OPT_INT: snprintf(def, sizeof(def), "%d", *(int*)o->value); break;
        case OPT_FLOAT: snprintf(def, sizeof(def), "%g", *(float*)o->value); break;
        case OPT_BOOL:
        case OPT_FLAG: snprintf(def, sizeof(def), "%s", *(int*)o->value ? "on" : "off"); break;
        default: {
            const char* s = *(const char**)o->value;
            snprintf(def, sizeof(def), "%s", s && *s ? s : "(none)");
        }
        }
        printf("  %-26s %s", left, o->help);
        if (o->type == OPT_CHOICE) printf(" {%s}", o->choices);
        printf(" [default: %s]\n", def);
    }
    printf("  %-26s %s\n", "-h, --help", "print this help and exit");
}

// Returns 1 when --help was asked for (usage already printed), 0 otherwise. given: NULL, or n flags, each set to 1
// when the command line gives its option (and 0 when it does not).
static inline int parse_options_given(const Option* opts, int n, int argc, char** argv, unsigned char* given) {
    if (given) memset(given, 0, (size_t)n);
    const Option* prev = NULL;   // the option before this argument, when it took no separate value
    for (int i = 1; i < argc; i++) {
        const char* arg = argv[i];
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            print_usage(argv[0], opts, n);
            return 1;
        }
        const Option* found = NULL;
        const char* value = NULL;
        if (strncmp(arg, "--", 2) == 0) {
            const char* name = arg + 2;
            const char* eq = strchr(name, '=');
            size_t len = eq ? (size_t)(eq - name) : strlen(name);
            for (int k = 0; k < n; k++)
                if (strlen(opts[k].name) == len && strncmp(opts[k].name, name, len) == 0) found = &opts[k];
            fail_if(!found, "unknown option '%s' (see --help)", arg);
            if (eq) value = eq + 1;
        } else if (arg[0] == '-' && arg[1] != '\0' && arg[2] == '\0') {
            for (int k = 0; k < n; k++)
                if (opts[k].alias && opts[k].alias == arg[1]) found = &opts[k];
            fail_if(!found, "unknown option '%s' (see --help)", arg);
        } else if (arg[0] == '-') {
            fail("unknown option '%s': long options start with -- (see --help)", arg);
        } else {
            fail_if(prev && prev->type == OPT_FLAG && parse_bool_word(arg) >= 0, "unexpected argument '%s': --%s is a "
                    "switch that takes no separate value (--%s turns it on, --%s=%s sets it)", arg, prev->name,
                    prev->name, prev->name, arg);
            fail("unexpected argument '%s': options start with -- (see --help)", arg);
        }
        prev = value ? NULL : found;
        if (!value && found->type == OPT_FLAG) value = "on";
        if (!value) {
            fail_if(i + 1 >= argc, "option %s needs a value (see --help)", arg);
            fail_if(strncmp(argv[i + 1], "--", 2) == 0, "option %s needs a value, but the next argument is the option "
                    "'%s' (a value that starts with -- is given as --%s=VALUE)", arg, argv[i + 1], found->name);
            value = argv[++i];
            prev = NULL;
        }
        option_set(found, value);
        if (given) given[found - opts] = 1;
    }
    return 0;
}

static inline int parse_options(const Option* opts, int n, int argc, char** argv) {
    return parse_options_given(opts, n, argc, argv, NULL);
}

// Whether the command line gave option `name` (given: parse_options_given's flags).
static inline int option_given(const Option* opts, int n, const unsigned char* given, const char* name) {
    for (int k = 0; k < n; k++)
        if (strcmp(opts[k].name, name) == 0) return given[k];
    fail("internal: option_given: no option --%s", name);
    return 0;
}
