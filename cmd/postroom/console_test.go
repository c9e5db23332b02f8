package main

import (
	"net"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestConsoleURL: the address printed is one a browser can open: a
// listener on every address (IPv4 or IPv6) is printed as loopback.
func TestConsoleURL(t *testing.T) {
	for addr, want := range map[*net.TCPAddr]string{
		{IP: net.IPv4(127, 0, 0, 1), Port: 8080}: "http://127.0.0.1:8080/",
		{IP: net.IPv6loopback, Port: 8080}:       "http://[::1]:8080/",
		{IP: net.IPv4zero, Port: 8080}:           "http://127.0.0.1:8080/ (listening on every address of this machine)",
		{IP: net.IPv6unspecified, Port: 9000}:    "http://127.0.0.1:9000/ (listening on every address of this machine)",
		{IP: net.IPv4(10, 1, 2, 3), Port: 80}:    "http://10.1.2.3:80/",
	} {
		require.Equal(t, want, consoleURL(addr), addr.String())
	}
}
