//go:build !amd64 || purego

package cpu

// Portable build: no vector kernels; the *SIMD hooks do nothing.

var useSIMD = false

func dotTileSIMD([]float32, int, rows, int, rows, int, int) bool           { return false }
func accTileSIMD([]float32, int, []float32, int, int, int, rows, int) bool { return false }
func expRowSIMD([]float32, float32, float32) (int, float32)                { return 0, 0 }
func probRowSIMD([]float32, []float32, float32) int                        { return 0 }
func dsRowSIMD([]float32, []float32, float32) int                          { return 0 }
func dsRowVecSIMD([]float32, []float32, []float32) int                     { return 0 }
func rowMaxMinSIMD([]float32) (n int, mx, mn float32)                      { return 0, 0, 0 }
func capRowSIMD([]float32, []float32, float32, float32, float32, int, int) (int, float32) {
	return 0, negInf
}
func biasRowSIMD([]float32, float32, float32, int, int) (int, float32) { return 0, negInf }
func addBiasSIMD([]float32, []float32, float32) (int, float32)         { return 0, negInf }
func dsRowSoftSIMD([]float32, []float32, []float32, float32) int       { return 0 }
func dsRowVecSoftSIMD([]float32, []float32, []float32, []float32) int  { return 0 }
func scaleRowSIMD([]float32, float32) int                              { return 0 }
func dropRowSIMD([]float32, []uint32, *[2]float32) bool                { return false }
func dropColSIMD([]float32, []float32, []uint8, uint, *[2]float32) int { return 0 }
func philoxSIMD(*[8]uint32, *[10][2]uint32, uint32, uint32, uint32, uint32, uint32) bool {
	return false
}
