package datastore

import "strconv"

// formatLIBSVM appends record i of r as a LIBSVM line (with newline).
func formatLIBSVM(dst []byte, r *Records, i int, base uint64) []byte {
	l, k, v := r.Row(i)
	dst = strconv.AppendFloat(dst, l, 'g', -1, 64)
	for j := range k {
		dst = append(dst, ' ')
		dst = strconv.AppendUint(dst, k[j]+base, 10)
		dst = append(dst, ':')
		dst = strconv.AppendFloat(dst, v[j], 'g', -1, 64)
	}
	return append(dst, '\n')
}
