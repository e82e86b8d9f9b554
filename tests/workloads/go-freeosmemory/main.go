// Command go-freeosmemory calls debug.FreeOSMemory() in a loop, as services
// that "keep their memory low" do from a ticker: each round allocates and
// drops 8 MiB of buffers, then forces a GC that gives every free page of the
// heap back to the kernel (madvise), which the next round faults in again.
// Runs ROUNDS rounds, or until STOP_FILE exists. Prints pid=<pid> first,
// then the rounds made.
//
//	go-freeosmemory ROUNDS [STOP_FILE]
package main

import (
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
)

const (
	buffers    = 32
	bufferSize = 256 << 10
)

// sink keeps the buffers reachable until the round drops them.
var sink [][]byte

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: go-freeosmemory ROUNDS [STOP_FILE]")
		os.Exit(2)
	}
	rounds, err := strconv.Atoi(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "go-freeosmemory:", err)
		os.Exit(2)
	}
	stop := ""
	if len(os.Args) > 2 {
		stop = os.Args[2]
	}
	fmt.Printf("pid=%d\n", os.Getpid())
	done := 0
	for ; done < rounds; done++ {
		if stop != "" {
			if _, err := os.Stat(stop); err == nil {
				break
			}
		}
		for i := 0; i < buffers; i++ {
			b := make([]byte, bufferSize)
			b[0], b[len(b)-1] = 1, 1
			sink = append(sink, b)
		}
		sink = nil
		debug.FreeOSMemory()
	}
	fmt.Printf("rounds=%d\n", done)
}
