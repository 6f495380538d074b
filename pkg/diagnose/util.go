package diagnose

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
)

// maxEvents is how many of an object's last events describe shows.
const maxEvents = 3

// human formats a duration as kubectl shows ages.
func human(d time.Duration) string { return duration.HumanDuration(d) }

func forbidden(err error) bool { return apierrors.IsForbidden(err) }

func sortByName[T metav1.Object](objs []T) {
	slices.SortFunc(objs, func(a, b T) int { return strings.Compare(a.GetName(), b.GetName()) })
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// eventTime is when an event was last seen.
func eventTime(e corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

func sortEvents(events []corev1.Event) {
	slices.SortStableFunc(events, func(a, b corev1.Event) int { return eventTime(a).Compare(eventTime(b)) })
}

func (s *store) formatEvent(e corev1.Event) string {
	from := e.Source.Component
	if from == "" {
		from = e.ReportingController
	}
	count := ""
	if e.Count > 1 {
		count = fmt.Sprintf(" (x%d)", e.Count)
	}
	return fmt.Sprintf("%s ago %s %s: %s%s from %s", human(max(s.now.Sub(eventTime(e)), 0)), e.Type, e.Reason,
		strings.TrimSpace(e.Message), count, orNone(from))
}

// text is s made safe for a terminal: control characters (C0, DEL, C1: escape sequences that
// would move the cursor, clear lines or set the clipboard) and bidirectional overrides become
// visible escapes (\x1b, \u202e), and a line break cannot start a line of its own. Names,
// annotation values and messages come from whoever wrote the objects; text output passes them
// all through text, JSON and YAML keep them exact.
func text(s string) string {
	if !strings.ContainsFunc(s, unsafeRune) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case !unsafeRune(r):
			b.WriteRune(r)
		case r <= 0xff:
			fmt.Fprintf(&b, "\\x%02x", r)
		default:
			fmt.Fprintf(&b, "\\u%04x", r)
		}
	}
	return b.String()
}

func unsafeRune(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) || r == unicode.ReplacementChar
}
