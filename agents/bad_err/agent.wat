;; A deliberately failing agent: `tick` returns err("upstream refused the request").
;; Return area at 0: discriminant 1 (err), string pointer 16, string length 28.
(component
  (core module $m
    (memory (export "mem") 1)
    (data (i32.const 0) "\01\00\00\00\10\00\00\00\1c\00\00\00")
    (data (i32.const 16) "upstream refused the request")
    (func (export "tick") (result i32) (i32.const 0)))
  (core instance $i (instantiate $m))
  (func (export "tick") (result (result (error string)))
    (canon lift (core func $i "tick") (memory (core memory $i "mem")))))
