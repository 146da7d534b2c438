package signal

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// This file is a parser for the structured field values of RFC 9651, the
// syntax of the IETF RateLimit and RateLimit-Policy fields. It implements
// the parsing algorithms of RFC 9651 section 4.2 for Lists and Dictionaries,
// with every bare item type (Integer, Decimal, String, Token, Byte
// Sequence, Boolean, Date and Display String), inner lists and parameters.
// A field that fails to parse is ignored as a whole, as section 4.2
// requires. Parsing does not allocate unless a String holds escapes, a
// Display String is decoded, or a field holds more members or parameters
// than the stack buffers the callers pass in.

// sfKind is the type of a bare item.
type sfKind uint8

const (
	sfNone sfKind = iota
	sfInteger
	sfDecimal
	sfString
	sfToken
	sfBytes
	sfBoolean
	sfDate
	sfDisplay
	sfInnerList // a member that is an inner list; its items are not kept
)

// sfItem is a bare item. Str holds a String, Token, Display String or the
// base64 text of a Byte Sequence; Int an Integer or Date; Dec a Decimal;
// Bool a Boolean.
type sfItem struct {
	Kind sfKind
	Int  int64
	Dec  float64
	Str  string
	Bool bool
}

// sfParam is one parameter: a key and its value (Boolean true when the
// parameter has no value).
type sfParam struct {
	Key   string
	Value sfItem
}

// sfMember is a member of a List, or a member of a Dictionary (with Key).
// Its parameters are params[Lo:Hi] of the slice the parse returned.
type sfMember struct {
	Key    string
	Value  sfItem
	Lo, Hi int
}

// sfParser walks one field value.
type sfParser struct {
	s   string
	i   int
	bad bool
}

func (p *sfParser) eof() bool { return p.i >= len(p.s) }

func (p *sfParser) peek() byte {
	if p.i < len(p.s) {
		return p.s[p.i]
	}
	return 0
}

func (p *sfParser) skipSP() {
	for p.i < len(p.s) && p.s[p.i] == ' ' {
		p.i++
	}
}

func (p *sfParser) skipOWS() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

// parseSFList parses s as a List and appends its members and their
// parameters to members and params. ok is false when s is not a valid List;
// the appended data is then meaningless.
func parseSFList(s string, members []sfMember, params []sfParam) ([]sfMember, []sfParam, bool) {
	p := sfParser{s: s}
	p.skipSP()
	for !p.eof() {
		var m sfMember
		m.Lo = len(params)
		m.Value, params = p.itemOrInnerList(params)
		m.Hi = len(params)
		if p.bad {
			return members, params, false
		}
		members = append(members, m)
		if more, ok := p.nextMember(); !ok {
			return members, params, false
		} else if !more {
			break
		}
	}
	return members, params, true
}

// nextMember reads what follows a List's or Dictionary's member (RFC 8941
// sections 4.2.1 and 4.2.2): the end of the field (more false), or a comma
// and another member (more true); ok is false for anything else, a
// trailing comma included.
func (p *sfParser) nextMember() (more, ok bool) {
	p.skipOWS()
	if p.eof() {
		return false, true
	}
	if p.peek() != ',' {
		return false, false
	}
	p.i++
	p.skipOWS()
	return true, !p.eof()
}

// parseSFDictionary parses s as a Dictionary. A key that repeats keeps its
// last value, as section 4.2.2 requires.
func parseSFDictionary(s string, members []sfMember, params []sfParam) ([]sfMember, []sfParam, bool) {
	p := sfParser{s: s}
	p.skipSP()
	for !p.eof() {
		var m sfMember
		m.Key = p.key()
		if p.bad {
			return members, params, false
		}
		if p.peek() == '=' {
			p.i++
			m.Lo = len(params)
			m.Value, params = p.itemOrInnerList(params)
		} else {
			m.Value = sfItem{Kind: sfBoolean, Bool: true}
			m.Lo = len(params)
			params = p.params(params)
		}
		m.Hi = len(params)
		if p.bad {
			return members, params, false
		}
		replaced := false
		for j := range members {
			if members[j].Key == m.Key {
				members[j] = m
				replaced = true
			}
		}
		if !replaced {
			members = append(members, m)
		}
		if more, ok := p.nextMember(); !ok {
			return members, params, false
		} else if !more {
			break
		}
	}
	return members, params, true
}

func (p *sfParser) itemOrInnerList(params []sfParam) (sfItem, []sfParam) {
	if p.peek() == '(' {
		p.i++
		for {
			p.skipSP()
			if p.eof() {
				p.bad = true
				return sfItem{}, params
			}
			if p.peek() == ')' {
				p.i++
				break
			}
			// Items of an inner list and their parameters are validated
			// but not kept: no RateLimit field uses inner lists.
			mark := len(params)
			p.bareItem()
			params = p.params(params)[:mark]
			if p.bad {
				return sfItem{}, params
			}
			if c := p.peek(); c != ' ' && c != ')' {
				p.bad = true
				return sfItem{}, params
			}
		}
		return sfItem{Kind: sfInnerList}, p.params(params)
	}
	it := p.bareItem()
	if p.bad {
		return sfItem{}, params
	}
	return it, p.params(params)
}

func (p *sfParser) params(params []sfParam) []sfParam {
	mark := len(params)
	for !p.bad && p.peek() == ';' {
		p.i++
		p.skipSP()
		k := p.key()
		if p.bad {
			return params
		}
		v := sfItem{Kind: sfBoolean, Bool: true}
		if p.peek() == '=' {
			p.i++
			v = p.bareItem()
			if p.bad {
				return params
			}
		}
		replaced := false
		for j := mark; j < len(params); j++ {
			// A repeated key keeps its last value (section 4.2.3.2).
			if params[j].Key == k {
				params[j].Value = v
				replaced = true
				break
			}
		}
		if !replaced {
			params = append(params, sfParam{Key: k, Value: v})
		}
	}
	return params
}

func isLCAlpha(c byte) bool { return c >= 'a' && c <= 'z' }
func isDigit(c byte) bool   { return c >= '0' && c <= '9' }
func isAlpha(c byte) bool   { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// isTChar reports whether c is a tchar of RFC 9110.
func isTChar(c byte) bool {
	if isAlpha(c) || isDigit(c) {
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

func (p *sfParser) key() string {
	start := p.i
	if c := p.peek(); !isLCAlpha(c) && c != '*' {
		p.bad = true
		return ""
	}
	p.i++
	for p.i < len(p.s) {
		c := p.s[p.i]
		if !isLCAlpha(c) && !isDigit(c) && c != '_' && c != '-' && c != '.' && c != '*' {
			break
		}
		p.i++
	}
	return p.s[start:p.i]
}

func (p *sfParser) bareItem() sfItem {
	c := p.peek()
	switch {
	case c == '-' || isDigit(c):
		return p.number()
	case c == '"':
		return p.str()
	case c == '*' || isAlpha(c):
		return p.token()
	case c == ':':
		return p.bytes()
	case c == '?':
		return p.boolean()
	case c == '@':
		p.i++
		it := p.number()
		if it.Kind != sfInteger {
			p.bad = true
		}
		it.Kind = sfDate
		return it
	case c == '%':
		return p.display()
	}
	p.bad = true
	return sfItem{}
}

// number parses an Integer or Decimal (section 4.2.4).
func (p *sfParser) number() sfItem {
	start := p.i
	neg := false
	if p.peek() == '-' {
		neg = true
		p.i++
	}
	if !isDigit(p.peek()) {
		p.bad = true
		return sfItem{}
	}
	digits := p.i
	dot := -1
	for p.i < len(p.s) {
		c := p.s[p.i]
		if isDigit(c) {
			p.i++
		} else if c == '.' && dot < 0 {
			if p.i-digits > 12 {
				p.bad = true
				return sfItem{}
			}
			dot = p.i
			p.i++
		} else {
			break
		}
		if dot < 0 && p.i-digits > 15 || dot >= 0 && p.i-digits > 16 {
			p.bad = true
			return sfItem{}
		}
	}
	if dot < 0 {
		var n int64
		for _, c := range []byte(p.s[digits:p.i]) {
			n = n*10 + int64(c-'0')
		}
		if neg {
			n = -n
		}
		return sfItem{Kind: sfInteger, Int: n}
	}
	if frac := p.i - dot - 1; frac < 1 || frac > 3 {
		p.bad = true
		return sfItem{}
	}
	f, err := strconv.ParseFloat(p.s[start:p.i], 64)
	if err != nil {
		p.bad = true
		return sfItem{}
	}
	return sfItem{Kind: sfDecimal, Dec: f}
}

// str parses a String (section 4.2.5); escapes force a copy.
func (p *sfParser) str() sfItem {
	p.i++ // opening quote
	start := p.i
	escaped := false
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == '\\':
			p.i++
			if p.i >= len(p.s) || (p.s[p.i] != '"' && p.s[p.i] != '\\') {
				p.bad = true
				return sfItem{}
			}
			escaped = true
			p.i++
		case c == '"':
			raw := p.s[start:p.i]
			p.i++
			if escaped {
				var b strings.Builder
				for j := 0; j < len(raw); j++ {
					if raw[j] == '\\' {
						j++
					}
					b.WriteByte(raw[j])
				}
				raw = b.String()
			}
			return sfItem{Kind: sfString, Str: raw}
		case c < 0x20 || c > 0x7e:
			p.bad = true
			return sfItem{}
		default:
			p.i++
		}
	}
	p.bad = true // no closing quote
	return sfItem{}
}

func (p *sfParser) token() sfItem {
	start := p.i
	p.i++
	for p.i < len(p.s) {
		c := p.s[p.i]
		if !isTChar(c) && c != ':' && c != '/' {
			break
		}
		p.i++
	}
	return sfItem{Kind: sfToken, Str: p.s[start:p.i]}
}

func (p *sfParser) bytes() sfItem {
	p.i++
	start := p.i
	for p.i < len(p.s) {
		c := p.s[p.i]
		if c == ':' {
			raw := p.s[start:p.i]
			p.i++
			return sfItem{Kind: sfBytes, Str: raw}
		}
		if !isAlpha(c) && !isDigit(c) && c != '+' && c != '/' && c != '=' {
			break
		}
		p.i++
	}
	p.bad = true
	return sfItem{}
}

func (p *sfParser) boolean() sfItem {
	p.i++
	switch p.peek() {
	case '0':
		p.i++
		return sfItem{Kind: sfBoolean}
	case '1':
		p.i++
		return sfItem{Kind: sfBoolean, Bool: true}
	}
	p.bad = true
	return sfItem{}
}

// display parses a Display String (section 4.2.10): %"..." with lowercase
// percent-encoded bytes that must decode to valid UTF-8.
func (p *sfParser) display() sfItem {
	p.i++
	if p.peek() != '"' {
		p.bad = true
		return sfItem{}
	}
	p.i++
	var b []byte
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c < 0x20 || c > 0x7e:
			p.bad = true
			return sfItem{}
		case c == '%':
			if p.i+2 >= len(p.s) {
				p.bad = true
				return sfItem{}
			}
			hi, ok1 := lowerHex(p.s[p.i+1])
			lo, ok2 := lowerHex(p.s[p.i+2])
			if !ok1 || !ok2 {
				p.bad = true
				return sfItem{}
			}
			b = append(b, hi<<4|lo)
			p.i += 3
		case c == '"':
			p.i++
			s := string(b)
			if !utf8.ValidString(s) {
				p.bad = true
				return sfItem{}
			}
			return sfItem{Kind: sfDisplay, Str: s}
		default:
			b = append(b, c)
			p.i++
		}
	}
	p.bad = true
	return sfItem{}
}

func lowerHex(c byte) (byte, bool) {
	switch {
	case isDigit(c):
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}
