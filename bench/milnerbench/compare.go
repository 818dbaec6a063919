package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// tool is one side of a comparison.
type tool struct {
	Name    string    `json:"name"`
	Cmd     string    `json:"cmd"`
	Prepare string    `json:"prepare,omitempty"`
	Times   []float64 `json:"times"` // seconds, timed runs only
	Median  float64   `json:"median"`
	PeakMiB float64   `json:"peakMiB"` // process tree, sampled in the warm-up run
}

// comparison is the result of one `compare`.
type comparison struct {
	Label string  `json:"label"`
	A     *tool   `json:"a"`
	B     *tool   `json:"b"`
	Ratio float64 `json:"ratio"` // A median / B median
}

// runCompare is `milnerbench compare -label L -runs R -a CMD -b CMD
// [-a-prepare CMD] [-b-prepare CMD] [-warmup=false] -out FILE`: a warm-up
// run of each tool (which also samples the peak memory of its process tree;
// without it the first timed round does), then R timed rounds in
// alternating order (AB, BA, AB, ...), each run preceded by its untimed
// prepare command. Commands run under bash; a failing one stops the
// comparison. It prints one Markdown table row and writes FILE (JSON).
func runCompare(args []string) error {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	c := comparison{A: &tool{Name: "milner"}, B: &tool{Name: "terraform"}}
	fs.StringVar(&c.Label, "label", "", "row label")
	runs := fs.Int("runs", 5, "timed runs per tool")
	fs.StringVar(&c.A.Cmd, "a", "", "Milner's command")
	fs.StringVar(&c.A.Prepare, "a-prepare", "", "untimed command before each run of a")
	fs.StringVar(&c.B.Cmd, "b", "", "Terraform's command")
	fs.StringVar(&c.B.Prepare, "b-prepare", "", "untimed command before each run of b")
	out := fs.String("out", "", "JSON result file")
	logPath := fs.String("log", "/dev/null", "file that collects every command's output")
	warmup := fs.Bool("warmup", true, "an untimed first run of each tool samples the memory; without it, the first round does")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if c.A.Cmd == "" || *runs < 1 {
		return errors.New("need -a and -runs >= 1")
	}
	// Without -b (no Terraform on the machine) only Milner is timed.
	tools := []*tool{c.A, c.B}
	if c.B.Cmd == "" {
		tools = tools[:1]
	}
	logf, err := os.OpenFile(*logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer func() { _ = logf.Close() }()

	run := func(t *tool, sample bool) (float64, error) {
		if t.Prepare != "" {
			if _, _, err := timed(t.Prepare, logf, false); err != nil {
				return 0, fmt.Errorf("%s prepare: %w", t.Name, err)
			}
		}
		if _, err := fmt.Fprintf(logf, "### %s: %s\n", c.Label, t.Cmd); err != nil {
			return 0, err
		}
		secs, peak, err := timed(t.Cmd, logf, sample)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", t.Name, err)
		}
		if sample {
			t.PeakMiB = peak
		}
		return secs, nil
	}
	if *warmup {
		for _, t := range tools {
			if _, err := run(t, true); err != nil {
				return err
			}
		}
	}
	for i := range *runs {
		order := slices.Clone(tools)
		if i%2 == 1 {
			slices.Reverse(order)
		}
		for _, t := range order {
			s, err := run(t, i == 0 && !*warmup)
			if err != nil {
				return err
			}
			t.Times = append(t.Times, s)
		}
	}
	for _, t := range tools {
		t.Median = median(t.Times)
	}
	fmt.Printf("| %s | %s | ", c.Label, c.A.cell())
	if len(tools) == 1 {
		fmt.Printf("(no terraform) | – | %.0f | – |\n", c.A.PeakMiB)
	} else {
		c.Ratio = c.A.Median / c.B.Median
		fmt.Printf("%s | **%.2f** | %.0f | %.0f |\n", c.B.cell(), c.Ratio, c.A.PeakMiB, c.B.PeakMiB)
	}
	if *out == "" {
		return nil
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(*out, append(b, '\n'), 0o644)
}

// cell is the table cell of a tool's times: median (min–max).
func (t *tool) cell() string {
	return fmt.Sprintf("%.2f (%.2f–%.2f)", t.Median, slices.Min(t.Times), slices.Max(t.Times))
}

// timed runs cmd under bash with its output to log and returns its wall
// time and, when sample is set, the peak summed RSS of its process tree
// (polled every 50 ms).
func timed(cmd string, log *os.File, sample bool) (secs, peakMiB float64, err error) {
	c := exec.Command("bash", "-c", cmd)
	c.Stdout, c.Stderr = log, log
	start := time.Now()
	if err := c.Start(); err != nil {
		return 0, 0, err
	}
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	var peak int64
	if sample {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case err = <-done:
				return time.Since(start).Seconds(), float64(peak) / (1 << 20), err
			case <-tick.C:
				peak = max(peak, treeRSS(c.Process.Pid))
			}
		}
	}
	err = <-done
	return time.Since(start).Seconds(), 0, err
}

// treeRSS sums the resident memory of pid and all its descendants.
func treeRSS(root int) int64 {
	ents, _ := os.ReadDir("/proc")
	children := map[int][]int{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// Fields after the parenthesized command name: state, ppid, ...
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) > 1 {
			ppid, _ := strconv.Atoi(f[1])
			children[ppid] = append(children[ppid], pid)
		}
	}
	var sum int64
	page := int64(os.Getpagesize())
	for stack := []int{root}; len(stack) > 0; {
		pid := stack[len(stack)-1]
		stack = append(stack[:len(stack)-1], children[pid]...)
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/statm", pid))
		if err != nil {
			continue
		}
		if f := strings.Fields(string(b)); len(f) > 1 {
			rss, _ := strconv.ParseInt(f[1], 10, 64)
			sum += rss * page
		}
	}
	return sum
}

// median of xs (xs is not modified).
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
