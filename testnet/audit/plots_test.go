package audit

import (
	"bytes"
	"testing"

	"github.com/dpadmm/dpadmm/privacy"
	"github.com/dpadmm/dpadmm/testnet/internal/fixture"
)

// TestAuditPlotRenders renders the audit plot, decodes it and checks its size, that it is not
// blank and that its axes are labelled.
func TestAuditPlotRenders(t *testing.T) {
	res := []AuditResult{
		{Observer: "local", Test: AuditProjection, LowerEpsilon: 0.3, LowerEpsilonCI: [2]privacy.Epsilon{0.2, 0.9}, UpperEpsilon: 1.7, Confidence: 0.95},
		{Observer: "pairwise", Test: AuditResidue, LowerEpsilon: 0.1, LowerEpsilonCI: [2]privacy.Epsilon{0, 0.4}, UpperEpsilon: 0.7, Confidence: 0.95},
		{Observer: "final", Test: AuditResidue, LowerEpsilon: 0, LowerEpsilonCI: [2]privacy.Epsilon{0, privacy.Unbounded}, UpperEpsilon: privacy.Unbounded, Confidence: 0.95, Violation: true},
	}
	var buf bytes.Buffer
	if err := WriteAuditPNG(&buf, res, "audit"); err != nil {
		t.Fatal(err)
	}
	fixture.PNGOf(t, "audit", buf.Bytes(), float64(auditWidth(len(res))), auditPlotH+auditLegendH, 0.02)
	p, _, err := auditPlot(res, "audit")
	if err != nil {
		t.Fatal(err)
	}
	fixture.Labelled(t, "audit", p)
}
