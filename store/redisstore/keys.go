package redisstore

import "strings"

// DefaultPrefix starts every Redis key when Config.Prefix is empty.
const DefaultPrefix = "sluice:"

// rateKey returns the Redis key holding the state of (name, key) and the
// hash tag Redis Cluster hashes it by. See the package documentation for
// the layout.
func rateKey(prefix, key, name string) (rkey, tag string) {
	return tagKey(prefix, "rate:", key, name)
}

// tagKey builds prefix+kind+<key with its hash tag braced>+":"+name, every
// part escaped, and returns it with its hash tag.
func tagKey(prefix, kind, key, name string) (k, tag string) {
	var b strings.Builder
	b.Grow(len(prefix) + len(kind) + len(key) + len(name) + 8)
	b.WriteString(prefix)
	b.WriteString(kind)
	pre, t, post, ok := userTag(key)
	if !ok {
		pre, t, post = "", key, ""
	}
	writeEscaped(&b, pre, "%{}")
	b.WriteByte('{')
	start := b.Len()
	writeEscaped(&b, t, "%{}")
	end := b.Len()
	b.WriteByte('}')
	writeEscaped(&b, post, "%{}")
	b.WriteByte(':')
	writeEscaped(&b, name, "%:")
	k = b.String()
	return k, k[start:end]
}

// userTag splits key around the hash tag Redis would find in it on its own:
// the text between the first '{' and the first '}' after it, when that text
// is not empty.
func userTag(key string) (pre, tag, post string, ok bool) {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return "", "", "", false
	}
	j := strings.IndexByte(key[i+1:], '}')
	if j <= 0 {
		return "", "", "", false
	}
	return key[:i], key[i+1 : i+1+j], key[i+2+j:], true
}

// writeEscaped writes s with every byte of special percent-encoded, so that
// the key layout stays unambiguous whatever keys and names contain.
func writeEscaped(b *strings.Builder, s, special string) {
	if !strings.ContainsAny(s, special) {
		b.WriteString(s)
		return
	}
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if strings.IndexByte(special, c) >= 0 {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
			continue
		}
		b.WriteByte(c)
	}
}

// slot returns the Redis Cluster hash slot of a hash tag: CRC16 (XMODEM)
// modulo 16384.
func slot(tag string) uint16 {
	var crc uint16
	for i := 0; i < len(tag); i++ {
		crc = crc<<8 ^ crcTable[byte(crc>>8)^tag[i]]
	}
	return crc & 16383
}

var crcTable = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()
