;; A deliberately bad agent: `tick` spins forever without calling the host.
;; With fuel_per_tick it runs out of fuel; without, the tick's epoch deadline stops it.
(component
  (core module $m
    (memory (export "mem") 1)
    (func (export "tick") (result i32)
      (loop $spin (br $spin))
      unreachable))
  (core instance $i (instantiate $m))
  (func (export "tick") (result (result (error string)))
    (canon lift (core func $i "tick") (memory (core memory $i "mem")))))
