// redsync-peer -- the real redsync (github.com/go-redsync/redsync/v4, with
// go-redis v9) on the given redis-servers, driven line by line from a test
// (tests/test_redsync.c): one server is redsync's simple lock (SET NX PX,
// compare-and-delete), several are its RedLock (a majority of them).
//
// Usage: redsync-peer NAME PORT...
// Prints "ready", then one answer line per command on stdin:
//
//	acquire EXPIRY_MS TRIES  a mutex on NAME (WithExpiry, WithTries,
//	                         WithRetryDelay 50 ms): Lock() -> "ok" | "busy"
//	release                  Unlock() -> "released" | "error <message>"
//	extend                   Extend() -> "extended" | "error <message>"
//	value                    the token this mutex stored
//	quit
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredislib "github.com/redis/go-redis/v9"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: redsync-peer NAME PORT...")
		os.Exit(64)
	}
	name := os.Args[1]
	var pools []redis.Pool
	for _, p := range os.Args[2:] {
		c := goredislib.NewClient(&goredislib.Options{Addr: "127.0.0.1:" + p, MaxRetries: 1})
		pools = append(pools, goredis.NewPool(c))
	}
	rs := redsync.New(pools...)
	var m *redsync.Mutex
	out := bufio.NewWriter(os.Stdout)
	say := func(s string) {
		out.WriteString(s + "\n")
		out.Flush()
	}
	say("ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		w := strings.Fields(in.Text())
		if len(w) == 0 {
			continue
		}
		switch w[0] {
		case "quit":
			return
		case "acquire":
			expiry, _ := strconv.Atoi(w[1])
			tries, _ := strconv.Atoi(w[2])
			m = rs.NewMutex(name, redsync.WithExpiry(time.Duration(expiry)*time.Millisecond),
				redsync.WithTries(tries), redsync.WithRetryDelay(50*time.Millisecond))
			if err := m.LockContext(context.Background()); err != nil {
				var taken *redsync.ErrTaken
				if errors.Is(err, redsync.ErrFailed) || errors.As(err, &taken) {
					say("busy")
				} else {
					say("busy " + strings.ReplaceAll(err.Error(), "\n", " "))
				}
			} else {
				say("ok")
			}
		case "release":
			if ok, err := m.Unlock(); err != nil || !ok {
				say(fmt.Sprintf("error %v", err))
			} else {
				say("released")
			}
		case "extend":
			if ok, err := m.Extend(); err != nil || !ok {
				say(fmt.Sprintf("error %v", err))
			} else {
				say("extended")
			}
		case "value":
			say(m.Value())
		default:
			say("unknown command")
		}
	}
}
