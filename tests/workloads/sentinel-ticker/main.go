// sentinel-ticker: the fifth seed case with the real library. An otherwise
// idle Go program that initialises github.com/alibaba/sentinel-golang v1.0.4
// with UseCacheTime set from the environment: with USE_CACHE_TIME=true the
// library's cached-time ticker (a time.Sleep(time.Millisecond) loop) wakes
// the process about 1000 times a second; with false it stays idle.
//
// Prints "pid=<pid>" once initialised, then blocks forever.
package main

import (
	"fmt"
	"os"

	sentinel "github.com/alibaba/sentinel-golang/api"
	"github.com/alibaba/sentinel-golang/core/config"
)

func main() {
	conf := config.NewDefaultConfig()
	conf.Sentinel.UseCacheTime = os.Getenv("USE_CACHE_TIME") == "true"
	conf.Sentinel.Log.Dir = os.TempDir()
	if err := sentinel.InitWithConfig(conf); err != nil {
		fmt.Fprintln(os.Stderr, "sentinel-ticker:", err)
		os.Exit(1)
	}
	fmt.Printf("pid=%d\n", os.Getpid())
	select {}
}
