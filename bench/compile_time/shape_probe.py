# Compile-time probe: 300 random shape pairs, broadcast + transpose, written with attnx's plain
# templates (plain.cpp) and with Boost.Hana tuples (hana.cpp). Run: python3 shape_probe.py, then time
# `g++ -std=c++20 -fsyntax-only -I../../include plain.cpp` against hana.cpp (docs/design.md has the figures).
import random
random.seed(1)
N=300
pairs=[]
for i in range(N):
    r=random.randint(2,4)
    a=[random.randint(1,64) for _ in range(r)]
    b=[x if random.random()<0.7 else 1 for x in a]
    pairs.append((a,b))
# attnx: plain templates
with open('plain.cpp','w') as f:
    f.write('#include <attnx/shape/shape.hpp>\nusing namespace attnx;\n')
    for i,(a,b) in enumerate(pairs):
        f.write(f'static_assert(broadcast_shape_t<make_shape<{",".join(map(str,a))}>, make_shape<{",".join(map(str,b))}>>::size == {eval("*".join(map(str,a)))});\n')
        f.write(f'static_assert(transpose_t<make_shape<{",".join(map(str,a))}>>::rank == {len(a)});\n')
    f.write('int main(){}\n')
with open('hana.cpp','w') as f:
    f.write('''#include <boost/hana.hpp>
namespace hana = boost::hana;
template <std::size_t N> using ext = hana::size_t<N>;
constexpr auto broadcast = [](auto a, auto b) {
  return hana::zip_with([](auto x, auto y) { return hana::if_(x == hana::size_c<1>, y, x); }, a, b);
};
constexpr auto transpose = [](auto a) {
  constexpr auto n = hana::length(a);
  return hana::concat(hana::take_front(a, n - hana::size_c<2>), hana::make_tuple(hana::at(a, n - hana::size_c<1>), hana::at(a, n - hana::size_c<2>)));
};
constexpr auto product = [](auto a) { return hana::fold_left(a, hana::size_c<1>, hana::mult); };
''')
    for i,(a,b) in enumerate(pairs):
        ta='hana::make_tuple('+','.join(f'hana::size_c<{x}>' for x in a)+')'
        tb='hana::make_tuple('+','.join(f'hana::size_c<{x}>' for x in b)+')'
        f.write(f'static_assert(decltype(product(broadcast({ta}, {tb})))::value == {eval("*".join(map(str,a)))});\n')
        f.write(f'static_assert(decltype(hana::length(transpose({ta})))::value == {len(a)});\n')
    f.write('int main(){}\n')
