package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"k8s.io/klog/v2"
)

// shutdownTimeout bounds how long a server waits for in-flight requests (a
// scrape, a probe) when the process stops.
const shutdownTimeout = 5 * time.Second

// serve listens on addr and serves handler in the background. It listens
// before returning, so a port already in use fails Run at once rather than
// later in a log line. The returned stop shuts the server down gracefully and
// waits for it. addr "0" serves nothing.
func serve(ctx context.Context, name, addr string, handler http.Handler) (stop func(), err error) {
	if addr == "0" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s server: %w", name, err)
	}
	logger := klog.FromContext(ctx).WithValues("server", name, "address", ln.Addr().String())
	srv := &http.Server{
		Handler: handler,
		// Slow or idle clients must not pile up connections on an
		// endpoint the kubelet and Prometheus depend on.
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       90 * time.Second,
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		logger.Info("Serving")
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error(err, "Server failed")
		}
	}()
	return func() {
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
		defer cancel()
		if err := srv.Shutdown(shutdownCtx); err != nil {
			logger.Error(err, "Server did not shut down cleanly")
			_ = srv.Close()
		}
		<-done
	}, nil
}
