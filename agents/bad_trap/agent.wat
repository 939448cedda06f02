;; A deliberately bad agent: `tick` reads far outside its 64 KiB linear memory, which traps
;; with an out-of-bounds memory access.
(component
  (core module $m
    (memory (export "mem") 1)
    (func (export "tick") (result i32)
      (drop (i32.load (i32.const -16)))
      (i32.const 0)))
  (core instance $i (instantiate $m))
  (func (export "tick") (result (result (error string)))
    (canon lift (core func $i "tick") (memory (core memory $i "mem")))))
