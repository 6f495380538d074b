package conformance

import (
	"encoding/xml"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
)

// Counts are the outcomes of one suite's specs.
type Counts struct {
	Passed, Failed, Skipped int
}

// junitSuites is the part of ginkgo's JUnit report that Summarize reads.
type junitSuites struct {
	Suites []struct {
		Cases []struct {
			Name    string    `xml:"name,attr"`
			Skipped *struct { // a skipped spec; Message "skipped" alone: not selected at all
				Message string `xml:"message,attr"`
			} `xml:"skipped"`
			Failure *struct{} `xml:"failure"`
			Error   *struct{} `xml:"error"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

// suiteName finds the suite of an External Storage spec: the word after the test pattern,
// "... [Testpattern: Dynamic PV (default fs)] provisioning should ...".
var suiteName = regexp.MustCompile(`External Storage \[Driver: [^\]]*\] \[Testpattern:[^\]]*\] ([A-Za-z-]+)`)

// Summarize counts the External Storage specs of a ginkgo JUnit report per suite. Specs that the
// focus or skip expressions left out (ginkgo reports them as skipped with the bare message
// "skipped") are not counted; specs that ran and skipped themselves (the driver lacks a
// capability, the pattern does not apply) are.
func Summarize(r io.Reader) (map[string]Counts, error) {
	var report junitSuites
	if err := xml.NewDecoder(r).Decode(&report); err != nil {
		return nil, fmt.Errorf("read JUnit report: %w", err)
	}
	counts := map[string]Counts{}
	for _, s := range report.Suites {
		for _, c := range s.Cases {
			m := suiteName.FindStringSubmatch(c.Name)
			if m == nil {
				continue
			}
			n := counts[m[1]]
			switch {
			case c.Failure != nil || c.Error != nil:
				n.Failed++
			case c.Skipped != nil && strings.TrimSpace(c.Skipped.Message) == "skipped":
				continue
			case c.Skipped != nil:
				n.Skipped++
			default:
				n.Passed++
			}
			counts[m[1]] = n
		}
	}
	return counts, nil
}

// WriteSummary writes counts as a Markdown table, one row per suite and a total.
func WriteSummary(w io.Writer, counts map[string]Counts) error {
	names := make([]string, 0, len(counts))
	for n := range counts {
		names = append(names, n)
	}
	sort.Strings(names)
	var total Counts
	var b strings.Builder
	b.WriteString("| suite | passed | failed | skipped |\n|---|---|---|---|\n")
	for _, n := range names {
		c := counts[n]
		fmt.Fprintf(&b, "| %s | %d | %d | %d |\n", n, c.Passed, c.Failed, c.Skipped)
		total.Passed, total.Failed, total.Skipped = total.Passed+c.Passed, total.Failed+c.Failed, total.Skipped+c.Skipped
	}
	fmt.Fprintf(&b, "| total | %d | %d | %d |\n", total.Passed, total.Failed, total.Skipped)
	_, err := io.WriteString(w, b.String())
	return err
}
