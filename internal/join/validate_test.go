package join

import (
	"slices"
	"strings"
	"testing"
)

func TestCheckName(t *testing.T) {
	cases := []struct {
		name string
		want string // substring of the error; "" means valid
	}{
		{"node-4", ""},
		{"Node 4 (rack b)", ""},
		{"it's $HOME", ""},
		{"knoten-ä", ""},
		{"", "--name is required"},
		{"a,b", `must not contain "," or "="`},
		{"a=b", `must not contain "," or "="`},
		{"a\nb", "control characters"},
		{"a\tb", "control characters"},
		{"\xff", "not valid UTF-8"},
	}
	for _, tc := range cases {
		err := CheckName(tc.name)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("CheckName(%q): %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("CheckName(%q) = %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

func TestNormalizePeerURLs(t *testing.T) {
	if _, err := NormalizePeerURLs(nil); err == nil || !strings.Contains(err.Error(), "--peer-urls is required") {
		t.Errorf("no URLs: got %v, want --peer-urls is required", err)
	}
	got, err := NormalizePeerURLs([]string{"http://b:1", "http://a:1"})
	if err != nil || !slices.Equal(got, []string{"http://a:1", "http://b:1"}) {
		t.Errorf("got %q, %v; want them sorted", got, err)
	}
}
