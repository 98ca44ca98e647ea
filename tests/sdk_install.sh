#!/usr/bin/env bash
# sdk_install.sh — the SDK as a third party sees it: installs the build into a
# temporary prefix, builds examples/hello-plugin against that prefix alone
# (find_package(tessera) via CMAKE_PREFIX_PATH, and once more with plain cc and
# pkg-config), checks the plugin references no tessera symbol, and loads it by
# name from an INI file through the test driver.
#
# usage: sdk_install.sh BUILD_DIR SOURCE_DIR [DRIVER]
#   DRIVER defaults to BUILD_DIR/test_plugin (`test_plugin load CONFIG`).
set -euo pipefail
build=$1
src=$2
driver=${3:-$build/test_plugin}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "sdk_install.sh: FAIL: $*"; exit 1; }

echo "== install into $tmp/prefix"
cmake --install "$build" --prefix "$tmp/prefix" >"$tmp/install.log" || { cat "$tmp/install.log"; fail "cmake --install"; }
cfg=$(find "$tmp/prefix" -name tesseraConfig.cmake | head -n1)
[ -n "$cfg" ] || fail "no tesseraConfig.cmake installed (is cmake/tessera-install.cmake included by CMakeLists.txt?)"
[ -f "$tmp/prefix/include/tessera/plugin.h" ] || fail "include/tessera/plugin.h not installed"

echo "== configure and build examples/hello-plugin against the prefix"
cp -r "$src/examples/hello-plugin" "$tmp/hello-src" # out of tree: no path back to the sources
cmake -S "$tmp/hello-src" -B "$tmp/hello" -DCMAKE_PREFIX_PATH="$tmp/prefix" \
  -DCMAKE_BUILD_TYPE=Release >"$tmp/configure.log" 2>&1 || { cat "$tmp/configure.log"; fail "configure"; }
cmake --build "$tmp/hello" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; fail "build"; }
if grep -q "warning:" "$tmp/build.log"; then cat "$tmp/build.log"; fail "warnings"; fi
so="$tmp/hello/tessera-hello.so"
[ -f "$so" ] || fail "no $so"
if nm -D --undefined-only "$so" | grep -E ' (ts_|tessera_)'; then
  fail "the plugin references tessera symbols; it must use the host table"
fi
nm -D --defined-only "$so" | grep -q ' tessera_plugin_descriptor$' || fail "entry point not exported"

echo "== build it again with cc and pkg-config"
pcdir=$(dirname "$(find "$tmp/prefix" -name tessera.pc | head -n1)")
cflags=$(PKG_CONFIG_PATH="$pcdir" pkg-config --cflags tessera) || fail "pkg-config --cflags tessera"
mkdir -p "$tmp/pc"
cc -std=c11 -Wall -Wextra -Werror -shared -fPIC -Wl,--no-undefined $cflags \
  "$src/examples/hello-plugin/hello.c" -o "$tmp/pc/tessera-hello.so" || fail "cc with pkg-config flags"

echo "== load it by name from an INI file"
cat >"$tmp/run.ini" <<INI
[parallel]
plugins = hello
plugin_path = $tmp/hello

[hello]
greeting = hi from the sdk test
every = 1
INI
out=$("$driver" load "$tmp/run.ini" 2>&1) || { echo "$out"; fail "loading the plugin"; }
echo "$out"
echo "$out" | grep -q "plugin hello 0.1.0 (plugin ABI 1.3) $so" || fail "describe lacks the plugin line"
echo "$out" | grep -q "key hello.greeting" || fail "describe lacks key hello.greeting"
echo "$out" | grep -q "tessera: hello: hi from the sdk test (step 0)" || fail "the hook did not run"

echo "== an undeclared key in [hello] is refused"
printf 'bogus = 1\n' >>"$tmp/run.ini"
if out=$("$driver" load "$tmp/run.ini" 2>&1); then echo "$out"; fail "an unknown key was accepted"; fi
echo "$out"
echo "$out" | grep -q "run.ini:8: unknown key 'bogus' in \[hello\]" || fail "wrong message"
echo "sdk_install.sh: PASS"
