package gossip

import "math"

// Average returns the network's model f_bar = (1/N) sum_i f_i of the members' final
// models and each member's distance ||f_i - f_bar||_2, with the same arithmetic in the
// same order wherever the models come from (the simulator, a testnet of hosts, or the
// members' model.json files in 'dpadmm account models'), so the three agree bit for bit.
func Average(models [][]float64, dim int) (avg, dev []float64) {
	n := len(models)
	avg = make([]float64, dim)
	for _, f := range models {
		for j, v := range f {
			avg[j] += v
		}
	}
	for j := range avg {
		avg[j] /= float64(n)
	}
	dev = make([]float64, n)
	for i, f := range models {
		d := 0.0
		for j, v := range f {
			d += (v - avg[j]) * (v - avg[j])
		}
		dev[i] = math.Sqrt(d)
	}
	return avg, dev
}
