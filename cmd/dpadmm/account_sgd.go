package main

import (
	"fmt"
	"io"
	"math"

	"github.com/dpadmm/dpadmm/privacy"
)

const accountSubsampledHelp = `Usage: dpadmm account subsampled --q Q --noise-multiplier Z --steps T [--delta D] [--json]

(epsilon, delta) of T compositions of the Poisson-subsampled Gaussian mechanism (each record
included with probability Q, Gaussian noise of std Z times the L2 sensitivity), as in DP-SGD:
RDP of Mironov, Talwar and Zhang 2019 (exact at integer orders, a convexity upper bound
between them), converted with the tighter conversion used by Opacus and TF Privacy and,
for comparison, with the classic one. Abadi et al.'s example:
  dpadmm account subsampled --q 0.01 --noise-multiplier 4 --steps 10000 --delta 1e-5
`

// subsampledReport is the JSON output of "account subsampled".
type subsampledReport struct {
	Q               float64 `json:"q"`
	NoiseMultiplier float64 `json:"noise_multiplier"`
	Steps           int     `json:"steps"`
	Delta           float64 `json:"delta"`
	Epsilon         float64 `json:"epsilon"`
	Order           float64 `json:"order"`
	Conversion      string  `json:"conversion"`
	EpsilonClassic  float64 `json:"epsilon_classic"`
	OrderClassic    float64 `json:"order_classic"`
	ConversionClass string  `json:"conversion_classic"`
	Theorem         string  `json:"theorem"`
	ConditionsHold  string  `json:"conditions_hold"`
}

func runAccountSubsampled(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("account subsampled", accountSubsampledHelp, stdout)
	q := fs.Float64("q", 0, "sampling rate q in [0,1]")
	z := fs.Float64("noise-multiplier", 0, "noise std divided by the L2 sensitivity (> 0)")
	steps := fs.Int("steps", 0, "number of compositions T (>= 1)")
	delta := fs.Float64("delta", 1e-5, "delta of the (epsilon, delta) figure, in (0,1)")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErr(stderr, "subsampled: unexpected argument %q", fs.Arg(0))
	}
	if !(*delta > 0 && *delta < 1) {
		return usageErr(stderr, "subsampled: --delta must be in (0,1), got %v", *delta)
	}
	if *steps < 1 {
		return usageErr(stderr, "subsampled: --steps must be >= 1, got %d", *steps)
	}
	c, err := privacy.SubsampledGaussianCurveChecked(*q, *z, *steps)
	if err != nil {
		return usageErr(stderr, "subsampled: %v", err)
	}
	r := subsampledReport{
		Q: *q, NoiseMultiplier: *z, Steps: *steps, Delta: *delta,
		Conversion: privacy.Conversion, ConversionClass: privacy.ConversionClassic,
		Theorem: privacy.SubsampledGaussianNote, ConditionsHold: "assumed: they describe how the mechanism is run, which this command cannot check",
	}
	r.Epsilon, r.Order = privacy.ToDP(c, *delta)
	r.EpsilonClassic, r.OrderClassic = privacy.ToDPClassic(c, *delta)
	if math.IsInf(r.Epsilon, 0) {
		return fmt.Errorf("subsampled: no finite epsilon at delta %v", *delta)
	}
	if *asJSON {
		return writeJSON(stdout, r)
	}
	fmt.Fprintf(stdout, "Poisson-subsampled Gaussian: q=%g, noise multiplier %g, %d steps, delta %g\n", *q, *z, *steps, *delta)
	fmt.Fprintf(stdout, "  epsilon %.4f at order %g (%s)\n", r.Epsilon, r.Order, r.Conversion)
	fmt.Fprintf(stdout, "  epsilon %.4f at order %g with the classic conversion (%s)\n", r.EpsilonClassic, r.OrderClassic, r.ConversionClass)
	fmt.Fprintf(stdout, "  %s\n", r.Theorem)
	fmt.Fprintf(stdout, "  conditions hold: assumed (they describe how the mechanism is run, which this command cannot check)\n")
	return nil
}
