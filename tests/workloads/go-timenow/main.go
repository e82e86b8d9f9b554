// Command go-timenow reads the clock with time.Now() in a loop, as a Go
// service stamping requests does: for 10 ms, then a 10 ms sleep, over and
// over until STOP_FILE exists or SECONDS have passed. Prints pid=<pid>
// first, then how many times it called time.Now().
//
//	go-timenow SECONDS [STOP_FILE]
package main

import (
	"fmt"
	"os"
	"strconv"
	"time"
)

const (
	readFor  = 10 * time.Millisecond
	sleepFor = 10 * time.Millisecond
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: go-timenow SECONDS [STOP_FILE]")
		os.Exit(2)
	}
	seconds, err := strconv.Atoi(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "go-timenow:", err)
		os.Exit(2)
	}
	stop := ""
	if len(os.Args) > 2 {
		stop = os.Args[2]
	}
	fmt.Printf("pid=%d\n", os.Getpid())
	end := time.Now().Add(time.Duration(seconds) * time.Second)
	reads, sink := 1, int64(0)
	for {
		now := time.Now()
		reads++
		if !now.Before(end) {
			break
		}
		if _, err := os.Stat(stop); stop != "" && err == nil {
			break
		}
		until := now.Add(readFor)
		for now.Before(until) {
			now = time.Now()
			reads++
		}
		sink += now.UnixNano()
		time.Sleep(sleepFor)
	}
	fmt.Printf("reads=%d sink=%d\n", reads, sink&1)
}
