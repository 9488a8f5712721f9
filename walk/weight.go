package walk

// LossWeight is the weight w_i of node i's local loss in the walk: n rows_i / M, for n
// members holding M rows in all, node i rows_i of them. With f_i = w_i (mean loss of the
// node's rows), sum_i f_i = n (mean loss over all M rows), and the walk, which visits the
// nodes uniformly, minimises the global mean loss plus the regulariser. Every driver (the
// simulators, the fault studies, the audit, the in-process and process launchers, a real
// node from its membership) computes the weight here and nowhere else: the weight enters
// the update and, through c_q = w_i/(q rows_i) of the gradient steps, the released token,
// so two copies that round differently would make the simulator predict a run the nodes
// do not make. TestRulesWrittenOnce (testnet/rules_test.go) keeps the expression in this
// file.
//
// It returns 0 for a degenerate membership (no member or no rows), which every loss
// constructor refuses with its own error.
func LossWeight(members, rows, totalRows int) float64 {
	if members <= 0 || totalRows <= 0 {
		return 0
	}
	return float64(members) * float64(rows) / float64(totalRows)
}
