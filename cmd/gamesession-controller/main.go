package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	// Maintenance windows name IANA time zones; the image has no zoneinfo
	// of its own, so the binary carries it (about 450 KB).
	_ "time/tzdata"

	"k8s.io/klog/v2"

	"github.com/example/gamesession-controller/cmd/gamesession-controller/app"
)

func main() {
	opts := app.NewOptions()
	klog.InitFlags(nil)
	opts.AddFlags(flag.CommandLine)
	printVersion := flag.Bool("version", false, "Print the version and exit.")
	flag.Parse()
	if *printVersion {
		fmt.Println("gamesession-controller", app.Version)
		return
	}

	// The first SIGTERM or SIGINT cancels the context: workers finish their
	// current item and the process exits. A second one kills it at once.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		<-ctx.Done()
		stop()
	}()
	ctx = klog.NewContext(ctx, klog.Background().WithName("gamesession-controller"))

	if err := app.Run(ctx, opts); err != nil {
		klog.FromContext(ctx).Error(err, "Controller failed")
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
	klog.Flush()
}
