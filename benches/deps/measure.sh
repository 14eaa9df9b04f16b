#!/usr/bin/env bash
# What depending on idutil costs an application: the release build time
# (wall and CPU) from an empty target directory, and the stripped size, of
# a binary that prints one ID, or, without IDUTIL_SRC, of one that prints
# "hello". BENCHMARKS.md, *Dependency cost*, has the figures.
#
# Usage: benches/deps/measure.sh NAME [IDUTIL_SRC]   (work in $WORK/NAME)
set -euo pipefail
name=$1; src=${2:-}
dir=${WORK:-/var/tmp/idutil-deps}/$name
rm -rf "$dir"; mkdir -p "$dir/src"
if [ -n "$src" ]; then
  printf '[package]\nname = "app"\nversion = "0.1.0"\nedition = "2021"\n\n[dependencies]\nidutil = { path = "%s" }\n' "$src" > "$dir/Cargo.toml"
  echo 'fn main() { println!("{}", idutil::IdUtil::next_id()); }' > "$dir/src/main.rs"
else
  printf '[package]\nname = "app"\nversion = "0.1.0"\nedition = "2021"\n\n[dependencies]\n' > "$dir/Cargo.toml"
  echo 'fn main() { println!("hello"); }' > "$dir/src/main.rs"
fi
cd "$dir"
[ -n "$src" ] && cp "$src/Cargo.lock" . 2>/dev/null || true
cargo fetch -q --offline 2>/dev/null || cargo fetch -q

/usr/bin/time -o "$dir/time.txt" -f "%e %U %S" env CARGO_TARGET_DIR="$dir/target" cargo build --release -q --offline

strip -o "$dir/app.stripped" "$dir/target/release/app"
read wall user sys < "$dir/time.txt"; printf "%s wall=%ss cpu=%.1fs stripped=%d bytes\n" "$name" "$wall" "$(echo "$user + $sys" | bc)" "$(stat -c %s "$dir/app.stripped")"
