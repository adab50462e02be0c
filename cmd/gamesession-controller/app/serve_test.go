package app

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
)

func TestServeDisabled(t *testing.T) {
	stop, err := serve(context.Background(), "test", "0", http.NotFoundHandler())
	if err != nil {
		t.Fatal(err)
	}
	stop()
}

func TestServeAndStop(t *testing.T) {
	// Find a free port, then serve on it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	stop, err := serve(context.Background(), "test", addr, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("hello"))
	}))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + addr + "/")
	if err != nil {
		t.Fatalf("GET: %v", err)
	}
	resp.Body.Close()

	// A second server on the same address fails at once, not later.
	if _, err := serve(context.Background(), "second", addr, http.NotFoundHandler()); err == nil || !strings.Contains(err.Error(), "second server") {
		t.Errorf("serving twice on %s: err = %v, want an error naming the server", addr, err)
	}

	stop()
	http.DefaultClient.CloseIdleConnections()
	if _, err := http.Get("http://" + addr + "/"); err == nil {
		t.Errorf("server still answers after stop")
	}
}
