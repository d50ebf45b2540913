//go:build !amd64

package kvstore

// putFloat64sTo32 converts nothing here: putFloat32s's loop does it all.
func putFloat64sTo32(dst []byte, src []float64) int { return 0 }

// getFloat32sPrefix reads nothing here: getFloat32s's loop does it all.
func getFloat32sPrefix(out []float64, raw []byte) int { return 0 }

// addFloat32sTo32Prefix adds nothing here: addFloat32sTo32's loop does it all.
func addFloat32sTo32Prefix(dst []float32, raw []byte) int { return 0 }
