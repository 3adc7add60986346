package sim

import (
	"strings"
	"unicode/utf8"
)

// Token is a vocabulary index.
type Token uint16

// DSML fragments and chat-template markers: each is one token.
const (
	TagCallsOpen    = "<｜DSML｜function_calls>"
	TagCallsClose   = "</｜DSML｜function_calls>"
	TagInvokeOpen   = "<｜DSML｜invoke name=\""
	TagInvokeClose  = "</｜DSML｜invoke>"
	TagParamOpen    = "<｜DSML｜parameter name=\""
	TagParamString  = "\" string=\""
	TagParamClose   = "</｜DSML｜parameter>"
	TagAttrEnd      = "\">"
	MarkBOS         = "<｜begin▁of▁sentence｜>"
	MarkEOS         = "<｜end▁of▁sentence｜>"
	MarkUser        = "<｜User｜>"
	MarkAssistant   = "<｜Assistant｜>"
	MarkToolOutput  = "<｜tool▁output｜>"
	MarkHint        = "<｜plan｜>"
	dsmlMarker      = "｜DSML｜"
	maxPieceBytes   = 64
	vocabByteTokens = 256
)

// vocabWords are the whole-word tokens of the twin's vocabulary: enough
// English for system prompts, tool results and answers, plus the names tools
// and parameters are built from.
var vocabWords = strings.Fields(`
the a an and or of to in on for with by from at as is are was be this that it
you your we our they their he she his her not no yes all any each every some
can will must should may use using used call called calls tool tools function
functions result results answer answers user assistant system helpful careful
file files path paths line lines text content data value values name names type
types string number boolean array object list item items key keys id ids query
city weather forecast temperature unit units celsius fahrenheit today tomorrow
search read write run command commands output input error errors status code
directory repository branch commit test tests build server request response
page pages token tokens cache memory batch stream graph index kernel buffer
found open close closed opened total count limit offset first last next previous
report summary done step steps plan task tasks check checks checked ok failed
passed running pending time date hour hours minute minutes second seconds day
days week month year price stock market order orders customer account email
message messages send sent receive received calendar event events meeting room
get set add remove update create delete list_files read_file write_file
run_command search_web get_weather get_stock_price send_email create_event
query_database fetch_url
location days_ahead pattern recursive max_results symbol currency to_address
subject body start_time duration_minutes sql timeout_seconds url headers
when where what which who how why because then than there here these those
here's following called returned contains shows says reported according
format formats example examples reply replies respond must never always only
London Paris Tokyo Berlin Madrid Oslo Cairo Lima Seoul Denver
main src docs config scripts notes readme go py json yaml md log
`)

// vocabPunct are single-character and short punctuation tokens.
var vocabPunct = []string{" ", "\n", ".", ",", ":", ";", "/", "-", "_", "\"", "'", "{", "}", "[", "]", "(", ")",
	"=", "<", ">", "!", "?", "*", "#", "$", "%", "+", "@", "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "true", "false", "null"}

// Vocab is the twin's tokenizer: a fixed vocabulary of DSML fragments,
// chat-template markers, words and punctuation, with one token per byte as
// the fallback so any UTF-8 text round-trips.
type Vocab struct {
	pieces []string
	index  map[string]Token
	maxLen int
}

// Special token ids of DefaultVocab.
var (
	defaultVocab = newVocab()
	TokEOS       = defaultVocab.MustID(MarkEOS)
	TokBOS       = defaultVocab.MustID(MarkBOS)
	TokUser      = defaultVocab.MustID(MarkUser)
	TokAssistant = defaultVocab.MustID(MarkAssistant)
	TokTool      = defaultVocab.MustID(MarkToolOutput)
	TokHint      = defaultVocab.MustID(MarkHint)
)

// DefaultVocab returns the twin's vocabulary (shared, read-only).
func DefaultVocab() *Vocab { return defaultVocab }

func newVocab() *Vocab {
	v := &Vocab{index: map[string]Token{}}
	for b := range vocabByteTokens {
		v.pieces = append(v.pieces, string([]byte{byte(b)}))
	}
	add := func(s string) {
		if _, ok := v.index[s]; ok || len(s) == 1 {
			return
		}
		v.index[s] = Token(len(v.pieces))
		v.pieces = append(v.pieces, s)
		v.maxLen = max(v.maxLen, len(s))
	}
	for _, s := range []string{TagCallsOpen, TagCallsClose, TagInvokeOpen, TagInvokeClose, TagParamOpen,
		TagParamString, TagParamClose, TagAttrEnd, MarkBOS, MarkEOS, MarkUser, MarkAssistant, MarkToolOutput, MarkHint} {
		add(s)
	}
	for _, s := range vocabPunct {
		add(s)
	}
	for _, w := range vocabWords {
		add(w)
	}
	for b := range vocabByteTokens { // single bytes map to the byte tokens
		v.index[string([]byte{byte(b)})] = Token(b)
	}
	v.maxLen = max(v.maxLen, 1)
	return v
}

// Size is the number of tokens.
func (v *Vocab) Size() int { return len(v.pieces) }

// Piece returns the text of token t ("" for an id outside the vocabulary).
func (v *Vocab) Piece(t Token) string {
	if int(t) < len(v.pieces) {
		return v.pieces[t]
	}
	return ""
}

// ID returns the token whose text is exactly s.
func (v *Vocab) ID(s string) (Token, bool) {
	t, ok := v.index[s]
	return t, ok
}

// MustID is ID for pieces known to be in the vocabulary; it panics otherwise.
func (v *Vocab) MustID(s string) Token {
	t, ok := v.index[s]
	if !ok {
		panic("sim: piece not in vocabulary: " + s)
	}
	return t
}

// Encode tokenizes s greedily, longest piece first. Text outside the
// vocabulary falls back to byte tokens, so Decode(Encode(s)) == s for every s.
func (v *Vocab) Encode(s string) []Token {
	out := make([]Token, 0, len(s)/3+1)
	return v.AppendEncode(out, s)
}

// AppendEncode appends the tokens of s to dst.
func (v *Vocab) AppendEncode(dst []Token, s string) []Token {
	for i := 0; i < len(s); {
		n := min(v.maxLen, len(s)-i)
		for ; n > 1; n-- {
			if t, ok := v.index[s[i:i+n]]; ok {
				dst = append(dst, t)
				break
			}
		}
		if n <= 1 {
			dst = append(dst, Token(s[i]))
			n = 1
		}
		i += n
	}
	return dst
}

// Decode concatenates the pieces of toks. Byte tokens reassemble UTF-8; an
// invalid sequence is kept as its bytes.
func (v *Vocab) Decode(toks []Token) string {
	var b strings.Builder
	for _, t := range toks {
		b.WriteString(v.Piece(t))
	}
	return b.String()
}

// DecodeValid is Decode with invalid UTF-8 replaced by U+FFFD (for JSON).
func (v *Vocab) DecodeValid(toks []Token) string {
	s := v.Decode(toks)
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}
