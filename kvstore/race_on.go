//go:build race

package kvstore

// raceEnabled: built with the race detector. Hogwild adds are then atomic
// (see addHogwild32), so the detector reports real races only.
const raceEnabled = true
