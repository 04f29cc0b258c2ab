#!/usr/bin/env bash
# scripts/setup.sh — makes this machine able to run the README's commands: checks each thing
# that `./scripts/test.sh` (and the broker's embedded PostgreSQL) needs, installs what is
# missing when it can (as root, or through `sudo -n`, with Debian's apt-get), and otherwise
# stops at once naming the exact command to run. A second run finds everything and changes
# nothing. Called by scripts/test.sh and .ci/run; safe to run by hand.
#
# What it checks, in order:
#   Rust         cargo with rustfmt and clippy (never installed here: rustup's business)
#   C compiler   cc, for linking and for zstd-sys          (Debian: build-essential)
#   PostgreSQL   a directory holding initdb and postgres, searched as the broker's launcher
#                searches (PG_BINDIR, pg_config --bindir, /usr/lib/postgresql/*/bin, PATH)
#                                                          (Debian: postgresql-15)
#   postgres     the OS user the embedded PostgreSQL runs as when we are root
#   pg_auto_failover  pg_autoctl and the monitor's extension for that PostgreSQL, the HA
#                tests' formation (crates/formation)
#                                                          (Debian: pg-auto-failover-cli
#                                                           postgresql-15-auto-failover)
#   Chromium     $CHROMIUM (default /usr/bin/chromium) and $CHROMEDRIVER (default
#                /usr/bin/chromedriver), the dashboard's browser tests (chromium chromium-driver)
#   Python       python3 with venv and ensurepip, for compat/ and the dashboard tests
#                                                          (python3-venv)
#   valgrind     queen-bench's cost scenario (instructions per message)   (valgrind)
# Exit status: 0 when everything is there; 1 after printing what to run.
set -euo pipefail

DEFAULT_CHROMIUM=/usr/bin/chromium
DEFAULT_CHROMEDRIVER=/usr/bin/chromedriver

log() { printf '[setup] %s\n' "$*" >&2; }

# stop WHAT COMMAND: the need WHAT is missing and this script cannot install it.
stop() {
    log "MISSING: $1"
    log "run:     $2"
    log "then run ./scripts/setup.sh again (./scripts/test.sh runs it first)."
    exit 1
}

# How to become root for apt-get: nothing when we are root, `sudo -n` when it needs no
# password, otherwise we cannot install and only say what to run.
AS_ROOT=()
CAN_INSTALL=false
SUDO_WORD="sudo "
if [[ "$(id -u)" == 0 ]]; then
    CAN_INSTALL=true
    SUDO_WORD=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    AS_ROOT=(sudo -n)
    CAN_INSTALL=true
fi
command -v apt-get >/dev/null 2>&1 || CAN_INSTALL=false

# The command a person runs to install PACKAGES (refreshing the package lists first: a fresh
# machine has none).
apt_command() { printf '%sapt-get update && %sapt-get install -y %s' "$SUDO_WORD" "$SUDO_WORD" "$*"; }

APT_UPDATED=false
# install WHAT PACKAGES...: installs them, or stops naming the command when we cannot.
install() {
    local what="$1"
    shift
    if ! "$CAN_INSTALL"; then
        command -v apt-get >/dev/null 2>&1 ||
            log "this machine has no apt-get: install the equivalent of Debian's $* instead."
        stop "$what" "$(apt_command "$@")"
    fi
    log "installing $* ($what)"
    if ! "$APT_UPDATED"; then
        "${AS_ROOT[@]}" apt-get update -qq || stop "$what (apt-get update failed)" "$(apt_command "$@")"
        APT_UPDATED=true
    fi
    "${AS_ROOT[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null ||
        stop "$what (apt-get install failed)" "$(apt_command "$@")"
}

# ---------------------------------------------------------------- Rust

check_rust() {
    if ! command -v cargo >/dev/null 2>&1; then
        stop "the Rust toolchain (cargo)" "curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh"
    fi
    local component
    for component in fmt clippy; do
        if ! cargo "$component" --version >/dev/null 2>&1; then
            stop "cargo $component (the rustfmt and clippy components)" "rustup component add rustfmt clippy"
        fi
    done
    log "ok: $(cargo --version) with rustfmt and clippy"
}

check_cc() {
    if ! command -v cc >/dev/null 2>&1; then
        install "a C compiler (cc)" build-essential
        command -v cc >/dev/null 2>&1 || stop "a C compiler (cc)" "$(apt_command build-essential)"
    fi
    log "ok: C compiler $(command -v cc)"
}

# ---------------------------------------------------------------- PostgreSQL

# The first directory holding executable initdb and postgres, in the launcher's search order
# (crates/embedded-pg/src/binaries.rs); nothing when there is none.
pg_bindir() {
    local -a dirs=() path_dirs=()
    [[ -z "${PG_BINDIR:-}" ]] || dirs+=("$PG_BINDIR")
    if command -v pg_config >/dev/null 2>&1; then
        dirs+=("$(pg_config --bindir 2>/dev/null || true)")
    fi
    local d
    local -a versions=(/usr/lib/postgresql/*/bin)
    [[ -d "${versions[0]}" ]] || versions=()
    while IFS= read -r d; do dirs+=("$d"); done < <(printf '%s\n' "${versions[@]}" | sort -Vr)
    IFS=: read -r -a path_dirs <<<"${PATH:-}"
    dirs+=("${path_dirs[@]}")
    for d in "${dirs[@]}"; do
        if [[ -n "$d" && -x "$d/initdb" && -x "$d/postgres" ]]; then
            printf '%s\n' "$d"
            return
        fi
    done
}

# Debian's package of the server version the project is tested with, or the distribution's
# default version where that one is not offered.
pg_package() {
    if apt-cache show postgresql-15 >/dev/null 2>&1; then echo postgresql-15; else echo postgresql; fi
}

check_postgres() {
    local dir
    dir="$(pg_bindir)"
    if [[ -z "$dir" ]]; then
        install "the PostgreSQL server binaries (initdb, postgres)" "$(pg_package)"
        dir="$(pg_bindir)"
        [[ -n "$dir" ]] || stop "the PostgreSQL server binaries (initdb, postgres)" \
            "$(apt_command "$(pg_package)")   # or set PG_BINDIR to a directory holding them"
    fi
    log "ok: PostgreSQL server binaries in $dir"
}

# PostgreSQL refuses to run as root; as root the embedded launcher runs it as this user.
check_postgres_user() {
    if [[ "$(id -u)" != 0 ]]; then
        log "ok: not root, the embedded PostgreSQL runs as $(id -un)"
        return
    fi
    if ! getent passwd postgres >/dev/null; then
        log "creating the postgres OS user"
        useradd --system --create-home --home-dir /var/lib/postgresql --shell /bin/bash postgres
    fi
    log "ok: OS user postgres"
}

# pg_autoctl, and the pgautofailover extension of the server version check_postgres found:
# the formation of the HA tests and `queen-chaos --failover` (crates/formation).
pg_auto_failover_ok() {
    local dir share
    command -v pg_autoctl >/dev/null 2>&1 || return 1
    dir="$(pg_bindir)"
    share="$("$dir/pg_config" --sharedir 2>/dev/null)" || return 1
    [[ -f "$share/extension/pgautofailover.control" ]]
}

check_pg_auto_failover() {
    local -a packages=(pg-auto-failover-cli postgresql-15-auto-failover)
    if ! pg_auto_failover_ok; then
        install "pg_auto_failover (pg_autoctl and the monitor extension)" "${packages[@]}"
        pg_auto_failover_ok || stop "pg_auto_failover for $(pg_bindir)" "$(apt_command "${packages[@]}")"
    fi
    log "ok: $(pg_autoctl --version 2>/dev/null | head -n 1)"
}

# ---------------------------------------------------------------- browser and Python

# check_browser_file VAR DEFAULT: the file named by $VAR (DEFAULT when unset) is executable.
# A path of one's own that is missing is not ours to install.
check_browser_file() {
    local var="$1" default="$2" path
    path="${!var:-$default}"
    [[ -x "$path" ]] && return
    if [[ "$path" != "$default" ]]; then
        stop "$var=$path is not an executable file" "unset $var   # or point it at an executable file"
    fi
    install "$path (the dashboard's browser tests)" chromium chromium-driver
    [[ -x "$path" ]] || stop "$path" "$(apt_command chromium chromium-driver)"
}

check_browser() {
    check_browser_file CHROMIUM "$DEFAULT_CHROMIUM"
    check_browser_file CHROMEDRIVER "$DEFAULT_CHROMEDRIVER"
    log "ok: ${CHROMIUM:-$DEFAULT_CHROMIUM} and ${CHROMEDRIVER:-$DEFAULT_CHROMEDRIVER}"
}

python_has_venv() { python3 -c 'import venv, ensurepip' >/dev/null 2>&1; }

check_python() {
    if ! python_has_venv; then
        install "Python 3 with venv and ensurepip" python3 python3-venv
        python_has_venv || stop "venv and ensurepip for $(command -v python3 || echo python3)" \
            "$(apt_command python3 python3-venv)   # or put a python3 that has them first on PATH"
    fi
    log "ok: $(python3 --version 2>&1) with venv ($(command -v python3))"
}

# queen-bench's cost scenario counts the broker's instructions under callgrind.
check_valgrind() {
    if ! command -v valgrind >/dev/null 2>&1; then
        install "valgrind (queen-bench --scenario cost)" valgrind
        command -v valgrind >/dev/null 2>&1 || stop "valgrind" "$(apt_command valgrind)"
    fi
    log "ok: $(valgrind --version)"
}

check_rust
check_cc
check_postgres
check_postgres_user
check_pg_auto_failover
check_browser
check_python
check_valgrind
log "everything the tests need is here"
