package rls

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"unicode/utf8"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/sluicerl/sluice/store"
)

// The key a descriptor is counted under, within its rule's policy, is its
// entries written key=value and joined with '&' ("remote_address=10.0.0.1",
// "source_cluster=proxy&destination_cluster=mock"), with '%', '&', '=',
// control characters and invalid UTF-8 percent-encoded, so that different
// descriptors never share a key. An entry matched through a wildcard with
// share_threshold counts under the wildcard ("files=files/*"), so every
// value it matches shares one limit. The HTTP API reaches the same state
// with the policy's name and this key. A key longer than
// store.MaxIDBytes keeps its first keyPrefixBytes and ends in
// "#sha256:" and the hash of the whole key.

// keyPrefixBytes is how much of an over-long key is kept before its hash.
const keyPrefixBytes = 400

func descriptorKey(entries []*ratelimitv3.RateLimitDescriptor_Entry, path []*node, wild []bool) string {
	var b strings.Builder
	n := 0
	for i, e := range entries {
		n += len(e.Key) + len(e.Value) + 2
		if path[i] != nil && wild[i] && path[i].share {
			n += len(path[i].value)
		}
	}
	b.Grow(n)
	for i, e := range entries {
		if i > 0 {
			b.WriteByte('&')
		}
		escape(&b, e.Key)
		b.WriteByte('=')
		v := e.Value
		if path[i] != nil && wild[i] && path[i].share {
			v = path[i].value
		}
		escape(&b, v)
	}
	key := b.String()
	if len(key) <= store.MaxIDBytes {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	cut := keyPrefixBytes
	for cut > 0 && !utf8.RuneStart(key[cut]) {
		cut--
	}
	return key[:cut] + "#sha256:" + hex.EncodeToString(sum[:])
}

const hexDigits = "0123456789ABCDEF"

func escape(b *strings.Builder, s string) {
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c < 0x7f {
			if c == '%' || c == '&' || c == '=' {
				b.WriteByte('%')
				b.WriteByte(hexDigits[c>>4])
				b.WriteByte(hexDigits[c&15])
			} else {
				b.WriteByte(c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size <= 1) || store.IsControl(r) {
			for j := i; j < i+size; j++ {
				b.WriteByte('%')
				b.WriteByte(hexDigits[s[j]>>4])
				b.WriteByte(hexDigits[s[j]&15])
			}
		} else {
			b.WriteString(s[i : i+size])
		}
		i += size
	}
}
