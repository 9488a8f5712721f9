package main

import (
	"flag"
	"fmt"
	"io"
	"math"

	"github.com/dpadmm/dpadmm/privacy"
)

const accountSubsampledHelp = `Usage: dpadmm account subsampled --q Q (--noise-multiplier Z | --target-epsilon E) --steps T [--adjacency add-remove|replace-one] [--delta D] [--json]

(epsilon, delta) of T compositions of the Poisson-subsampled Gaussian mechanism (each record
included with probability Q, Gaussian noise of std Z times the L2 sensitivity), as in DP-SGD:
RDP of Mironov, Talwar and Zhang 2019, exact at every order of the grid up to a 1e-9
upward rounding (the binomial expansion at integer orders, certified quadrature at
fractional ones; below noise multiplier 0.1 some fractional orders use the log-convexity
bound between integer orders), converted with the tighter conversion used by Opacus and
TF Privacy and, for comparison, with the classic one. With --target-epsilon the noise multiplier is calibrated instead: the smallest Z (to
relative 1e-10) whose epsilon is at most E. Targets below what the conversion allows at
delta D even without privacy loss (0.0035 at delta 1e-5, as the order grid stops at 1024)
are refused. Abadi et al.'s example:
  dpadmm account subsampled --q 0.01 --noise-multiplier 4 --steps 10000 --delta 1e-5

--adjacency replace-one gives the figure for one record replaced (the count unchanged), the
adjacency of the walk's ls-sgd and sgd steps: the add/remove curve at two orders joined by
the weak triangle inequality of Renyi divergence, capped by the Gaussian of sensitivity 2
(exact at q = 1). The walk-sgd figure of a run with per-example clip C and noise sigma is
  dpadmm account subsampled --adjacency replace-one --q Q --noise-multiplier sigma/C --steps K
`

// subsampledReport is the JSON output of "account subsampled".
type subsampledReport struct {
	Q               float64         `json:"q"`
	Adjacency       string          `json:"adjacency"`
	NoiseMultiplier float64         `json:"noise_multiplier"`
	Calibrated      bool            `json:"noise_multiplier_calibrated"`
	TargetEpsilon   float64         `json:"target_epsilon,omitempty"`
	Steps           int             `json:"steps"`
	Delta           float64         `json:"delta"`
	Epsilon         privacy.Epsilon `json:"epsilon"`
	Order           float64         `json:"order"`
	Conversion      string          `json:"conversion"`
	EpsilonClassic  privacy.Epsilon `json:"epsilon_classic"`
	OrderClassic    float64         `json:"order_classic"`
	ConversionClass string          `json:"conversion_classic"`
	Theorem         string          `json:"theorem"`
	ConditionsHold  bool            `json:"conditions_hold"`
	Note            string          `json:"note"`
}

// subsampledAssumed says why conditions_hold is true for "account subsampled".
const subsampledAssumed = "conditions assumed: they describe how the mechanism is run (Poisson sampling " +
	"with rate q, noise of the stated std), which this command cannot check"

func runAccountSubsampled(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("account subsampled", accountSubsampledHelp, stdout)
	q := fs.Float64("q", 0, "sampling rate q in [0,1]")
	z := fs.Float64("noise-multiplier", 0, "noise std divided by the L2 sensitivity (> 0); ignored with --target-epsilon")
	steps := fs.Int("steps", 0, "number of compositions T (>= 1)")
	delta := fs.Float64("delta", privacy.DefaultDelta, "delta of the (epsilon, delta) figure, in (0,1)")
	target := fs.Float64("target-epsilon", 0, "calibrate the noise multiplier: smallest one meeting this epsilon")
	asJSON := fs.Bool("json", false, "print JSON")
	adj := fs.String("adjacency", "add-remove", "neighbouring datasets: add-remove (one record added or removed) or replace-one (one record replaced)")
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
	curveOf, theorem := privacy.SubsampledGaussianCurveChecked, privacy.SubsampledGaussianNote
	switch *adj {
	case "add-remove":
	case "replace-one":
		curveOf, theorem = privacy.SubsampledReplaceCurveChecked, privacy.SubsampledReplaceNote
	default:
		return usageErr(stderr, "subsampled: --adjacency must be add-remove or replace-one, got %q", *adj)
	}
	calibrate, zSet := false, false
	fs.Visit(func(f *flag.Flag) {
		calibrate = calibrate || f.Name == "target-epsilon"
		zSet = zSet || f.Name == "noise-multiplier"
	})
	switch {
	case calibrate && zSet:
		return usageErr(stderr, "subsampled: --target-epsilon calibrates the noise multiplier: give --noise-multiplier or --target-epsilon, not both")
	case !calibrate && !zSet:
		return usageErr(stderr, "subsampled: give --noise-multiplier Z (the noise) or --target-epsilon E (calibrate it)")
	}
	if calibrate {
		if !finitePositive(*target) {
			return usageErr(stderr, "subsampled: --target-epsilon must be finite and > 0, got %v", *target)
		}
		// Check q on its own before searching.
		if _, err := privacy.SubsampledGaussianCurveChecked(*q, 1, *steps); err != nil {
			return usageErr(stderr, "subsampled: %v", err)
		}
		if *q == 0 {
			return usageErr(stderr, "subsampled: --target-epsilon needs --q > 0 (with q = 0 no record is used and no noise is needed)")
		}
		s, err := privacy.CalibrateSigma(*target, *delta, func(s float64) privacy.Curve {
			c, err := curveOf(*q, s, *steps)
			if err != nil {
				return privacy.InfCurve()
			}
			return c
		})
		if err != nil {
			return fmt.Errorf("subsampled: %w", err)
		}
		*z = s
	}
	c, err := curveOf(*q, *z, *steps)
	if err != nil {
		return usageErr(stderr, "subsampled: %v", err)
	}
	r := subsampledReport{
		Q: *q, Adjacency: *adj, NoiseMultiplier: *z, Calibrated: calibrate, Steps: *steps, Delta: *delta,
		Conversion: privacy.Conversion, ConversionClass: privacy.ConversionClassic,
		Theorem: theorem, ConditionsHold: true, Note: subsampledAssumed,
	}
	if calibrate {
		r.TargetEpsilon = *target
	}
	eps, ord := privacy.ToDP(c, *delta)
	epsClassic, ordClassic := privacy.ToDPClassic(c, *delta)
	r.Epsilon, r.Order = privacy.Eps(eps), ord
	r.EpsilonClassic, r.OrderClassic = privacy.Eps(epsClassic), ordClassic
	if math.IsInf(eps, 0) {
		return fmt.Errorf("subsampled: no finite epsilon at delta %v", *delta)
	}
	if *asJSON {
		return writeJSON(stdout, r)
	}
	fmt.Fprintf(stdout, "Poisson-subsampled Gaussian: q=%g, noise multiplier %.10g", *q, *z)
	if calibrate {
		fmt.Fprintf(stdout, " (calibrated for epsilon %g)", *target)
	}
	fmt.Fprintf(stdout, ", %d steps, delta %g, %s adjacency\n", *steps, *delta, *adj)
	fmt.Fprintf(stdout, "  epsilon %.6g at order %g (%s)\n", r.Epsilon, r.Order, r.Conversion)
	fmt.Fprintf(stdout, "  epsilon %.6g at order %g with the classic conversion (%s)\n", r.EpsilonClassic, r.OrderClassic, r.ConversionClass)
	fmt.Fprintf(stdout, "  %s\n", r.Theorem)
	fmt.Fprintf(stdout, "  conditions hold: assumed (they describe how the mechanism is run, which this command cannot check)\n")
	return nil
}
