package outbound

import (
	"net"
	"net/url"
	"strings"
)

// HostKey returns the key of a URL's host: lowercased, with the scheme's
// default port (80 for http and ws, 443 for https and wss) dropped, so that
// http://API.example.com:80/x and http://api.example.com/y share a key.
// An empty host gives "".
func HostKey(u *url.URL) string {
	host := strings.ToLower(u.Host)
	h, port, err := net.SplitHostPort(host)
	if err != nil {
		return strings.TrimSuffix(host, ":") // no port (or a bare colon)
	}
	scheme := strings.ToLower(u.Scheme)
	if port == "" ||
		(port == "80" && (scheme == "http" || scheme == "ws")) ||
		(port == "443" && (scheme == "https" || scheme == "wss")) {
		if strings.Contains(h, ":") {
			return "[" + h + "]"
		}
		return h
	}
	return host
}
