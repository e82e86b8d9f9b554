#!/bin/sh
# Builds the disruptor-spin workload: fetches com.lmax:disruptor:4.0.0 into the
# local Maven repository if it is not there yet, compiles Spin.java into OUT
# ($1, default tests/workloads/disruptor-spin/build) and prints the classpath
# to run it with:  java -cp "$(sh build.sh)" Spin 3 yielding
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/build}
repo=${MAVEN_REPO:-$HOME/.m2/repository}
jar=$repo/com/lmax/disruptor/4.0.0/disruptor-4.0.0.jar
if [ ! -f "$jar" ]; then
    mvn -q -Dmaven.repo.local="$repo" dependency:get -Dartifact=com.lmax:disruptor:4.0.0 >&2
fi
mkdir -p "$out"
javac -d "$out" -cp "$jar" "$here/Spin.java" >&2
echo "$jar:$out"
